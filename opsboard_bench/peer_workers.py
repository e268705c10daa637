"""Worker processes of the peers ``opsboard bench --peers`` compares opsboard with.

Run as ``python -m opsboard_bench.peer_workers {bare|pgqueuer} URL NAME``
(never imported by opsboard itself).  Each prints ``ready`` once it is
connected and waiting, handles no-op jobs until SIGTERM, then prints one JSON
line ``{"handled": n, "latency_ms": [...]}`` and exits.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import datetime, timezone

#: The bare loop: claim-and-finish up to 100 due jobs in one statement.
BARE_CLAIM = """
UPDATE bare_jobs SET status = 'done', worker = %(worker)s, started_at = clock_timestamp(),
                     finished_at = clock_timestamp()
WHERE id IN (SELECT id FROM bare_jobs WHERE status = 'pending' AND available_at <= now()
             ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)
RETURNING id
"""

BARE_SCHEMA = """
CREATE TABLE bare_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending',
    payload jsonb,
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    worker text
);
CREATE INDEX bare_jobs_pending ON bare_jobs (id) WHERE status = 'pending';
CREATE FUNCTION bare_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_notify('bare_jobs', ''); RETURN NULL; END $$;
CREATE TRIGGER bare_jobs_notify AFTER INSERT ON bare_jobs FOR EACH STATEMENT EXECUTE FUNCTION bare_jobs_notify();
"""


def _report(handled: int, latency: list[float]) -> None:
    sys.stdout.write(json.dumps({"handled": handled, "latency_ms": latency}) + "\n")
    sys.stdout.flush()
    os._exit(0)


def bare(url: str, name: str) -> None:
    import psycopg

    handled = 0
    signal.signal(signal.SIGTERM, lambda *_: _report(handled, []))
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url, autocommit=True) as listen:
        listen.execute("LISTEN bare_jobs")
        print("ready", flush=True)
        while True:
            n = len(conn.execute(BARE_CLAIM, {"worker": name}, prepare=True).fetchall())
            handled += n
            if n == 0:
                for _ in listen.notifies(timeout=1.0, stop_after=1):
                    pass


def pgq(url: str, name: str) -> None:
    import asyncio

    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer

    handled = 0
    latency: list[float] = []

    async def main() -> None:
        conn = await asyncpg.connect(url)
        app = PgQueuer(AsyncpgDriver(conn))

        @app.entrypoint("noop")
        async def noop(job) -> None:
            nonlocal handled
            handled += 1
            latency.append((datetime.now(timezone.utc) - job.created).total_seconds() * 1000)

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: _report(handled, latency))
        asyncio.get_running_loop().call_later(0.3, lambda: print("ready", flush=True))
        await app.run()

    asyncio.run(main())


if __name__ == "__main__":
    kind, url, name = sys.argv[1:4]
    {"bare": bare, "pgqueuer": pgq}[kind](url, name)
    time.sleep(0)
