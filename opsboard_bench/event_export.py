"""``opsboard bench --scenario event_export``: the export of outbox events to NATS JetStream (issue 46).

Two parts, each on a ``nats-server -js`` of its own (a free port, a store folder in a temporary
directory, so that it can be restarted):

1. **Rate.**  A backlog of N events (``--jobs``, default 100,000; 100 aggregates), relayed to jobs by
   the relay's ``relay_events`` and exported by the exporter's ``run_once``, each alone in this
   process, one after the other on the same events: events per second of each.
2. **Chaos.**  N events published in batches while one ``python -m worker`` exports them; the worker
   is SIGKILLed once (a new one takes over) and NATS is stopped and started again during the run.
   Then the stream is read back: every event id must be there, and a re-send that JetStream's
   duplicate window dropped counts as a duplicate dropped, one it stored as a duplicate stored
   (there must be none).

:func:`chaos_run` is also what ``tests/chaos/test_event_export_chaos.py`` runs, with 5,000 events.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """``nats-server -js`` on a free port with its own store; :meth:`restart` keeps both."""

    def __init__(self, folder: Path):
        if not os.path.exists(NATS_SERVER):
            raise RuntimeError(f"{NATS_SERVER} is missing: apt-get install nats-server")
        self.port = _free_port()
        folder.mkdir(parents=True, exist_ok=True)
        self.store = folder / "nats-store"
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log = open(folder / "nats.log", "ab")
        self.proc: subprocess.Popen | None = None

    def start(self) -> "NatsServer":
        self.proc = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd",
                                      str(self.store)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not answer in 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def read_ids(url: str, stream: str) -> list[str]:
    """The Nats-Msg-Id of every message of ``stream``, in stream order (an ephemeral pull consumer)."""
    async def read():
        import nats
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig
        nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            js = nc.jetstream(timeout=10)
            total = (await js.stream_info(stream)).state.messages
            sub = await js.pull_subscribe("", stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE))
            ids: list[str] = []
            while len(ids) < total:
                try:
                    msgs = await sub.fetch(batch=1000, timeout=5)
                except NatsTimeout:
                    break
                ids.extend((m.headers or {}).get("Nats-Msg-Id", "") for m in msgs)
            return ids
        finally:
            await nc.close()
    return asyncio.run(read())


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def _publish(url: str, tenant, n: int, chunk: int = 1000, pause: float = 0.0) -> None:
    from opsboard import outbox
    with _connect(url) as c:
        for i in range(0, n, chunk):
            with c.transaction():
                for j in range(i, min(n, i + chunk)):
                    outbox.publish(c, "bench.happened", 1, aggregate=("thing", j % 100), tenant=tenant,
                                   payload={"n": j})
            if pause:
                time.sleep(pause)


def _exported(url: str) -> int:
    with _connect(url) as c:
        return c.execute("SELECT count(*) AS n FROM outbox_events WHERE exported_at IS NOT NULL").fetchone()["n"]


def _worker(db_url: str, nats_url: str, stream: str, prefix: str, folder: Path, n: int) -> subprocess.Popen:
    env = dict(os.environ)
    env.update({"DATABASE_URL": db_url, "OPSBOARD_ENV": "development", "OPSBOARD_LOG_FORMAT": "text",
                "PYTHONPATH": str(ROOT), "OPSBOARD_JOB_MODULES": "opsboard_bench.outbox",
                "OPSBOARD_EVENT_STREAM_URL": nats_url, "OPSBOARD_EVENT_STREAM_NAME": stream,
                "OPSBOARD_EVENT_SUBJECT_PREFIX": prefix})
    log = open(folder / f"worker-{n}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "worker", "--queues", "critical=1,default=4,bulk=1",
                             "--id", f"export-chaos-{n}"], env=env, stdout=log, stderr=subprocess.STDOUT)


def chaos_run(db_url: str, tenant, n: int, folder: Path, timeout: float = 600.0) -> dict:
    """Publish ``n`` events of ``tenant`` while a worker exports them to a NATS of its own; SIGKILL the
    worker at a third of the export (a new one starts) and restart NATS at two thirds.  Returns
    ``events``, ``in_stream``, ``missing``, ``stored_twice``, ``dropped_by_window`` (JetStream's
    duplicate window), ``seconds`` and ``worker_logs``."""
    from opsboard.catalogue import active
    from .outbox import register
    if ("bench.happened", 1) not in active().event_types:
        register(active())  # the event the workers know from OPSBOARD_JOB_MODULES=opsboard_bench.outbox
    stream, prefix = f"CHAOS_{uuid.uuid4().hex[:8]}", f"chaos{uuid.uuid4().hex[:8]}.events"
    failed: list[BaseException] = []

    def produce():
        try:
            _publish(db_url, tenant, n, pause=0.01)
        except BaseException as exc:  # told by the loop below, not lost in the thread
            failed.append(exc)
    server = NatsServer(folder).start()
    workers: list[subprocess.Popen] = []
    try:
        workers.append(_worker(db_url, server.url, stream, prefix, folder, 0))
        t0 = time.monotonic()
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        killed = restarted = False
        deadline = time.monotonic() + timeout
        while True:
            done = _exported(db_url)
            if not killed and done >= n // 3:
                workers[-1].send_signal(signal.SIGKILL)
                workers[-1].wait(10)
                workers.append(_worker(db_url, server.url, stream, prefix, folder, 1))
                killed = True
            elif killed and not restarted and done >= 2 * n // 3:
                server.restart()
                restarted = True
            if failed:
                raise RuntimeError(f"publishing failed: {failed[0]!r}")
            if done >= n and not producer.is_alive():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done} of {n} events exported in {timeout:.0f} s")
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        producer.join()
        ids = read_ids(server.url, stream)
        with _connect(db_url) as c:
            events = {str(r["id"]) for r in c.execute("SELECT id FROM outbox_events").fetchall()}
            dropped = c.execute("SELECT coalesce(sum(duplicates), 0)::bigint AS n FROM event_export_state"
                                ).fetchone()["n"]
        return {"events": len(events), "in_stream": len(ids), "missing": len(events - set(ids)),
                "stored_twice": len(ids) - len(set(ids)), "dropped_by_window": int(dropped),
                "killed": killed, "restarted": restarted, "seconds": seconds,
                "worker_logs": [str(folder / f"worker-{i}.log") for i in range(len(workers))]}
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        server.stop()


def rate(b, n: int, folder: Path) -> None:
    """Relay and export of the same backlog of ``n`` events, each alone in this process (events/s)."""
    from opsboard import outbox
    from opsboard.outbox.export import EventExporter, ExportConfig

    (tenant,) = b.tenants(1)
    _publish(b.url, tenant, n)
    with b.conn() as c:
        relayed, t0 = 0, time.perf_counter()
        while True:
            done = outbox.relay_events(c, 1000).events
            relayed += done
            if not done:
                break
        relay_s = time.perf_counter() - t0
    b.add("event_export", "relay: events -> jobs, 1 relay", relayed / relay_s, "events/s",
          f"{relayed} events, batch 1000, one subscriber")
    server = NatsServer(folder).start()
    try:
        exporter = EventExporter(ExportConfig(url=server.url, stream="BENCH_RATE", prefix="bench.events",
                                              budget=3600.0))
        with b.conn() as c:
            exporter.link.start()
            deadline = time.monotonic() + 30
            while not exporter.link.ready:
                if time.monotonic() > deadline:
                    raise RuntimeError("the exporter did not connect to its nats-server")
                time.sleep(0.05)
            exported, t0 = 0, time.perf_counter()
            while True:
                done = exporter.run_once(c)
                exported += done
                if not done:
                    break
            export_s = time.perf_counter() - t0
        exporter.link.close()
    finally:
        server.stop()
    b.add("event_export", "export: events -> JetStream, 1 exporter", exported / export_s, "events/s",
          f"{exported} events, batch 1000, waves of one event per aggregate (100 aggregates)")
    with b.conn() as c:
        c.execute("TRUNCATE outbox_events, jobs, event_export_state CASCADE")


def run(b) -> None:
    from .outbox import register
    from opsboard.catalogue import active
    register(active())
    n = b.jobs or 100_000
    with tempfile.TemporaryDirectory(prefix="opsboard-bench-nats-") as tmp:
        rate(b, n, Path(tmp) / "rate")
        (tenant,) = b.tenants(1)
        (Path(tmp) / "chaos").mkdir()
        result = chaos_run(b.url, tenant, n, Path(tmp) / "chaos", timeout=max(600.0, n / 50))
    b.add("event_export", "chaos: events missing from the stream", result["missing"], "events",
          f"{result['events']} events; worker SIGKILLed once, NATS restarted once")
    b.add("event_export", "chaos: duplicates stored in the stream", result["stored_twice"], "events",
          f"re-sends JetStream's duplicate window dropped: {result['dropped_by_window']}")
    b.add("event_export", "chaos: publish to exported, end to end", result["events"] / result["seconds"],
          "events/s", f"{result['events']} events in {result['seconds']:.1f} s (published in batches of 1,000 "
          "meanwhile; a SIGKILL, a new worker's start and a NATS restart inside)")
    with b.conn() as c:
        c.execute("TRUNCATE outbox_events, jobs, job_attempts, event_export_state CASCADE")
