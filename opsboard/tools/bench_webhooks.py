"""The ``webhooks`` bench scenario: signed deliveries to sandbox receivers, 100 endpoints,
10 % of them down, and the attempts the circuit breaker lets through to a down endpoint."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

from .sandbox import Sandbox

ENDPOINTS = 100
DOWN_EVERY = 10          # every 10th endpoint answers 503: 10 %
#: The down endpoints stay down this long (seconds); OPSBOARD_BENCH_WINDOW shortens it for a quick check.
WINDOW = float(os.environ.get("OPSBOARD_BENCH_WINDOW", "60"))
#: Receiver processes (the endpoints spread over them); 0 runs one sandbox in the benchmark's process.
RECEIVERS = int(os.environ.get("OPSBOARD_BENCH_RECEIVERS", "2"))
#: Signed deliveries per second the platform aims at with two worker processes (issue 27).
GOAL = 2000

_SERVE = ("import sys; from opsboard.tools.sandbox import Sandbox; "
          "sb = Sandbox('127.0.0.1', 0, 0, smtp=False).start(); print(sb.url, flush=True); "
          "sys.stdin.read(); sb.stop()")


class _Receiver:
    """A sandbox in a process of its own (so that the receivers do not share the benchmark's GIL),
    driven over its JSON API; it ends when its stdin closes."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError("a bench sandbox process did not start")

    def fault(self, route: str, **kw) -> None:
        req = urllib.request.Request(f"{self.url}/_sandbox/faults", json.dumps({"route": route, **kw}).encode(),
                                     {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def records(self, kind: str, route: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/_sandbox/records?kind={kind}&route={route}", timeout=30) as r:
            return json.loads(r.read())["records"]

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run(b, slots: str = "default=32", workers: int = 2) -> None:
    """Signed webhook deliveries, 100 endpoints (10% down for 60 s): deliveries/s, attempts on a down endpoint."""
    from psycopg.types.json import Jsonb

    from .. import jobqueue
    from ..deliveries import webhooks
    from ..schema import new_id

    total = b.jobs or 5000
    tenants = b.tenants(10)
    receivers = [_Receiver() for _ in range(RECEIVERS)] or [Sandbox("127.0.0.1", 0, 0, smtp=False).start()]
    try:
        endpoints = []
        with b.conn() as c:
            for i in range(ENDPOINTS):
                t = tenants[i % len(tenants)]
                sb = receivers[i % len(receivers)]
                ep = webhooks.create_endpoint(c, t, f"{sb.url}/hooks/ep{i}")
                endpoints.append((t, ep["id"], i % DOWN_EVERY == 0))
                if i % DOWN_EVERY == 0:
                    sb.fault(f"/hooks/ep{i}", status=503)
            per_endpoint = max(1, total // ENDPOINTS)
            jobs = []
            for _ in range(per_endpoint):
                for t in tenants:
                    eid = new_id()
                    # Relayed already: the benchmark enqueues the deliveries itself (the relay's
                    # fan-out would add its own jobs and deliveries to the measurement).
                    c.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id,"
                              " payload, relayed_at) VALUES (%s, 'order.paid', 1, 'order', 'o', %s, %s, now())",
                              (eid, t, Jsonb({"order_id": 1})))
                    jobs += [jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(ep), "event_id": str(eid)}, t,
                                          idempotency_key=f"{eid}:{ep}", event_id=eid)
                             for (tt, ep, _) in endpoints if tt == t]
            for i in range(0, len(jobs), 5000):
                with c.transaction():
                    jobqueue.enqueue_many(c, jobs[i:i + 5000])
            c.execute("VACUUM ANALYZE jobs")
        healthy = sum(1 for (_, _, down) in endpoints if not down) * per_endpoint
        down_count = sum(1 for e in endpoints if e[2])
        start = time.monotonic()
        b.start_workers(workers, slots, OPSBOARD_WEBHOOK_ALLOW="127.0.0.1", OPSBOARD_BREAKER_COOLDOWN="30",
                        OPSBOARD_BREAKER_FAILURES="5")
        with b.conn() as c:
            done = "FROM jobs WHERE status = 'succeeded' AND type = 'webhook.deliver'"
            while c.execute(f"SELECT count(*) AS n {done}").fetchone()["n"] < healthy:
                if time.monotonic() - start > 600:
                    raise RuntimeError("webhook deliveries did not finish in 600 s")
                time.sleep(0.2)
            row = c.execute("SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs "
                            + done).fetchone()
            time.sleep(max(0.0, WINDOW - (time.monotonic() - start)))
            snoozed = c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'snoozed'").fetchone()["n"]
        b.stop_workers()
        down_attempts = [len(receivers[i % len(receivers)].records("webhook", f"/hooks/ep{i}"))
                         for i in range(0, ENDPOINTS, DOWN_EVERY)]
        b.add("webhooks", "signed deliveries, 100 endpoints, 10% down", row["n"] / float(row["secs"]),
              "deliv/s", f"{row['n']} delivered, {workers} worker processes --queues {slots}, "
              + (f"{RECEIVERS} sandbox processes" if RECEIVERS else "sandbox in-process")
              + f"; goal {GOAL:,}/s with 2 workers")
        b.add("webhooks", f"attempts on a down endpoint in {int(WINDOW)} s", max(down_attempts), "requests",
              f"{per_endpoint} deliveries queued for each of {down_count}; mean "
              f"{sum(down_attempts) / len(down_attempts):.1f}; {snoozed} snoozes by open breakers")
    finally:
        for sb in receivers:
            sb.stop()
        b.reset()
