"""The ``prune`` scenario: the pruner on millions of finished jobs, and the claim's time meanwhile."""
from __future__ import annotations

import statistics
import time
import uuid

from opsboard import jobqueue

from .bulk_jobs import BULK_SQL, bulk_tenants
from .harness import Bench, percentile

def prune(b: Bench) -> None:
    """The pruner on --jobs finished jobs past retention (default 3,000,000, one attempt row each):
    rows/s, and the claim's time meanwhile; EXPLAIN (ANALYZE, BUFFERS, WAL) of one batch."""
    batch = 5000  # the pruner's default batch (worker.services.pruner.PrunerConfig)
    total = b.jobs or 3_000_000
    tenants = bulk_tenants(b, 100)
    t0 = time.perf_counter()
    with b.conn() as c:
        for first in range(1, total + 1, 1_000_000):
            c.execute(BULK_SQL, {"first": first, "last": min(total, first + 999_999), "total": total,
                                  "pending": 0, "age": 40 * 86400, "tenants": tenants, "n_tenants": len(tenants)})
        c.execute("INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome) "
                  "SELECT id, 1, 'bench', started_at, finished_at, 'succeeded' FROM jobs")
        # A live backlog beside them, for the claim timed during the prune.
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[k % 100]) for k in range(20_000)])
        c.execute("VACUUM ANALYZE jobs")
        c.execute("VACUUM ANALYZE job_attempts")
        fill = time.perf_counter() - t0
        from opsboard import db as dbmod
        from opsboard.schema import uuid7_floor
        from datetime import timedelta
        now = c.execute("SELECT now() AS n").fetchone()["n"]
        cutoff = now - timedelta(days=30)
        with c.transaction(force_rollback=True):
            plan = c.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + dbmod.queries["job_prune_finished"],
                             {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff), "after_id": uuid.UUID(int=0),
                              "limit": batch}).fetchone()
            doc = plan["QUERY PLAN"] if isinstance(plan, dict) else plan[0]
            top = doc[0]["Plan"]
            b.add("prune", f"one batch of {batch:,} (EXPLAIN ANALYZE)", float(doc[0]["Execution Time"]),
                  "ms", f"shared hit {top.get('Shared Hit Blocks', 0)} read {top.get('Shared Read Blocks', 0)} "
                  f"WAL {top.get('WAL Bytes', 0):,} B in {top.get('WAL Records', 0):,} records; triggers "
                  + ", ".join(f"{t['Trigger Name']} {t['Time']:.1f} ms" for t in doc[0].get("Triggers", [])))
    # The claim's time while the pruner runs in another process.
    claims: list[float] = []
    import threading
    done = threading.Event()

    def claimer():
        with b.conn() as cc:
            while not done.is_set():
                t1 = time.perf_counter()
                with cc.transaction(force_rollback=True):
                    jobqueue.claim_batch(cc, "default", "bench", 64, 30)
                claims.append(time.perf_counter() - t1)
                time.sleep(0.01)

    with b.conn() as cc:  # the claim alone first
        for _ in range(30):
            t1 = time.perf_counter()
            with cc.transaction(force_rollback=True):
                jobqueue.claim_batch(cc, "default", "bench", 64, 30)
            claims.append(time.perf_counter() - t1)
    alone = statistics.median(claims)
    claims.clear()
    th = threading.Thread(target=claimer, daemon=True)
    th.start()
    with b.conn() as c:
        t1 = time.perf_counter()
        n = jobqueue.prune_finished(c, cutoff, batch)
        elapsed = time.perf_counter() - t1
    done.set()
    th.join()
    left = 0
    with b.conn() as c:
        left = c.execute("SELECT count(*) AS n FROM job_attempts WHERE job_id NOT IN (SELECT id FROM jobs)").fetchone()["n"]
    b.add("prune", f"pruner on {total:,} finished jobs", n / elapsed, "jobs/s",
          f"{n:,} deleted in {elapsed:.1f} s, {left} orphan attempts")
    b.add("prune", "claim of 64 alone / during the prune", alone * 1000, "ms",
          f"during: median {statistics.median(claims) * 1000:.1f} ms, p99 {percentile(claims, 99) * 1000:.1f} ms, "
          f"{len(claims)} claims")
    print(f"  (filled {total:,} jobs in {fill:.0f} s)")
    b.reset()

