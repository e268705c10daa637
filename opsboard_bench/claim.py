"""The claim measured in-process: tenants' fairness behind a heavy one (``fairness``), and one claim's
plan at a million pending jobs (``claim_cost``)."""
from __future__ import annotations

import statistics
import time

from opsboard import jobqueue

from .harness import Bench, percentile

def fairness(b: Bench) -> None:
    """Heavy tenant A (50,000 jobs) then B-E (100 each): claims until B-E are done, their p99 wait."""
    heavy = b.jobs or 50_000
    tenants = b.tenants(5)
    with b.conn() as c:
        for i in range(0, heavy, 5000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[0]) for _ in range(min(5000, heavy - i))])
        c.execute("VACUUM ANALYZE jobs")
        with c.transaction():
            jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for t in tenants[1:] for _ in range(100)])
        light = set(tenants[1:])
        left, claims, cursor = 400, 0, jobqueue.ZERO_TENANT
        from opsboard import pauses
        holds = pauses.read_holds(c)   # read once, as a worker's cache would (a scratch database: none)
        t0 = time.perf_counter()
        while left > 0:
            got = jobqueue.claim(c, "default", "bench-fair", 64, 30, after_tenant=cursor, holds=holds)
            cursor = got.next_after_tenant
            claims += 1
            left -= sum(1 for r in got.rows if r["tenant_id"] in light)
            jobqueue.record_outcomes(c, "bench-fair", [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded",
                                                                          r["started_at"]) for r in got.rows])
        elapsed = time.perf_counter() - t0
        waits = [float(r["ms"]) for r in c.execute(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs WHERE tenant_id <> %s",
            (tenants[0],))]
        heavy_done = c.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status = 'succeeded'",
                               (tenants[0],)).fetchone()["n"]
    b.add("fairness", "claims of 64 until B-E (4 x 100) done", claims, "claims",
          f"A had {heavy} jobs queued first; {heavy_done} of A ran meanwhile")
    b.add("fairness", "B-E wait p99 (enqueue->start)", percentile(waits, 99), "ms",
          f"one claimer, {elapsed * 1000:.0f} ms in all")
    b.reset()



def claim_cost(b: Bench) -> None:
    """1,000,000 pending jobs over 1,000 tenants: EXPLAIN ANALYZE time of one claim of 64."""
    total = b.jobs or 1_000_000
    n_tenants = 1000
    tenants = b.tenants(n_tenants)
    t0 = time.perf_counter()
    with b.conn() as c:
        for i in range(0, total, 10_000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[j % n_tenants])
                                       for j in range(i, min(total, i + 10_000))])
        fill = time.perf_counter() - t0
        c.execute("VACUUM ANALYZE jobs")
        from opsboard import db as dbmod
        times = []
        for _ in range(5):
            with c.transaction(force_rollback=True):
                plan = c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + dbmod.queries["job_claim_many"], {
                    "queue": "default", "worker": "bench", "limit": 64, "lease": 30, "now": None,
                    "after_tenant": jobqueue.ZERO_TENANT, "max_tenants": 64, "limit_types": [],
                    "limit_type_limits": [], "limit_type_groups": [], "limit_groups": [],
                    "limit_group_limits": [], "limit_group_sides": [], "queue_held": False, "held_tenants": [], "held_types": [],
                    "tenant_caps": None, "locked": True}).fetchone()
                doc = plan["QUERY PLAN"] if isinstance(plan, dict) else plan[0]
                times.append(float(doc[0]["Execution Time"]))
        from opsboard import metrics
        from opsboard.auth import TenantScope
        t1 = time.perf_counter()
        metrics.sample_depth(c)
        sample = time.perf_counter() - t1
        t1 = time.perf_counter()
        metrics.queue_health(c, TenantScope(all=True))
        metrics.tenant_backlog_page(c, TenantScope(all=True))
        health = time.perf_counter() - t1
    b.add("claim_cost", f"claim of 64 at {total:,} pending, {n_tenants} tenants", statistics.median(times), "ms",
          f"EXPLAIN ANALYZE, median of 5 (filled at {total / fill:,.0f} jobs/s)")
    b.add("claim_cost", "depth fold of that fill (leader, every 2 s; was a recount)", sample * 1000, "ms")
    b.add("claim_cost", "queue health + tenants page backlog queries", health * 1000, "ms",
          "what the home and tenants pages run")
    b.reset()

