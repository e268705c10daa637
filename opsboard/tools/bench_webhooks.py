"""The ``webhooks`` bench scenario: signed deliveries to sandbox receivers, 100 endpoints,
10 % of them down, and the attempts the circuit breaker lets through to a down endpoint."""
from __future__ import annotations

import os
import time

from .sandbox import Sandbox

ENDPOINTS = 100
DOWN_EVERY = 10          # every 10th endpoint answers 503: 10 %
#: The down endpoints stay down this long (seconds); OPSBOARD_BENCH_WINDOW shortens it for a quick check.
WINDOW = float(os.environ.get("OPSBOARD_BENCH_WINDOW", "60"))


def run(b, slots: str = "default=32", workers: int = 2) -> None:
    """Signed webhook deliveries, 100 endpoints (10% down for 60 s): deliveries/s, attempts on a down endpoint."""
    from psycopg.types.json import Jsonb

    from .. import queue, webhooks
    from ..schema import new_id

    total = b.jobs or 5000
    tenants = b.tenants(10)
    sb = Sandbox("127.0.0.1", 0, 0, smtp=False).start()
    try:
        endpoints = []
        with b.conn() as c:
            for i in range(ENDPOINTS):
                t = tenants[i % len(tenants)]
                ep = webhooks.create_endpoint(c, t, f"{sb.url}/hooks/ep{i}")
                endpoints.append((t, ep["id"], i % DOWN_EVERY == 0))
                if i % DOWN_EVERY == 0:
                    sb.fault(f"/hooks/ep{i}", status=503)
            per_endpoint = max(1, total // ENDPOINTS)
            jobs = []
            for _ in range(per_endpoint):
                for t in tenants:
                    eid = new_id()
                    c.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id,"
                              " payload) VALUES (%s, 'order.paid', 1, 'order', 'o', %s, %s)",
                              (eid, t, Jsonb({"order_id": 1})))
                    jobs += [queue.NewJob("webhook.deliver", {"endpoint_id": str(ep), "event_id": str(eid)}, t,
                                          idempotency_key=f"{eid}:{ep}", event_id=eid)
                             for (tt, ep, _) in endpoints if tt == t]
            for i in range(0, len(jobs), 5000):
                with c.transaction():
                    queue.enqueue_many(c, jobs[i:i + 5000])
            c.execute("VACUUM ANALYZE jobs")
        healthy = sum(1 for (_, _, down) in endpoints if not down) * per_endpoint
        down_count = sum(1 for e in endpoints if e[2])
        start = time.monotonic()
        b.start_workers(workers, slots, OPSBOARD_WEBHOOK_ALLOW="127.0.0.1", OPSBOARD_BREAKER_COOLDOWN="30",
                        OPSBOARD_BREAKER_FAILURES="5")
        with b.conn() as c:
            while c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] < healthy:
                if time.monotonic() - start > 600:
                    raise RuntimeError("webhook deliveries did not finish in 600 s")
                time.sleep(0.2)
            row = c.execute("SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs "
                            "FROM jobs WHERE status = 'succeeded'").fetchone()
            time.sleep(max(0.0, WINDOW - (time.monotonic() - start)))
            snoozed = c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'snoozed'").fetchone()["n"]
        b.stop_workers()
        down_attempts = [len(sb.records("webhook", f"/hooks/ep{i}")) for i in range(0, ENDPOINTS, DOWN_EVERY)]
        b.add("webhooks", "signed deliveries, 100 endpoints, 10% down", row["n"] / float(row["secs"]),
              "deliv/s", f"{row['n']} delivered, {workers} workers --queues {slots}, sandbox in-process")
        b.add("webhooks", f"attempts on a down endpoint in {int(WINDOW)} s", max(down_attempts), "requests",
              f"{per_endpoint} deliveries queued for each of {down_count}; mean "
              f"{sum(down_attempts) / len(down_attempts):.1f}; {snoozed} snoozes by open breakers")
    finally:
        sb.stop()
        b.reset()
