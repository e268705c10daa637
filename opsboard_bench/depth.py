"""The ``depth`` scenario: the maintained queue depth at 10,000,000 jobs, beside the recount it replaced."""
from __future__ import annotations

import statistics
import time

from opsboard import jobqueue

from .bulk_jobs import BULK_SQL, bulk_tenants
from .harness import Bench

#: The depth sampler before migration 0044: a recount of every waiting, running
#: and dead job (kept here only to time it beside the fold).
_RECOUNT_SQL = """
SELECT queue, type, tenant_id, status, count(*) AS jobs FROM (
    SELECT queue, type, tenant_id, status FROM jobs WHERE status IN ('pending', 'retryable', 'dead')
    UNION ALL SELECT queue, type, tenant_id, status FROM jobs WHERE status = 'running') j
GROUP BY queue, type, tenant_id, status
"""


def _wal_of_xact(c, start_lsn, xid: int) -> int:
    """WAL bytes the transaction ``xid`` wrote since ``start_lsn`` (pg_walinspect: other sessions' WAL excluded)."""
    return int(c.execute("SELECT coalesce(sum(record_length), 0) AS b FROM pg_get_wal_records_info(%s, "
                         "pg_current_wal_flush_lsn()) WHERE xid = %s", (start_lsn, xid)).fetchone()["b"])


def depth(b: Bench) -> None:
    """Maintained depth at --jobs jobs (default 10,000,000; 20% pending) over 10,000 tenants: fold,
    reads and recount times; hot-path cost of the count triggers (on/off alternated)."""
    from opsboard import metrics
    from opsboard.auth import TenantScope
    total = b.jobs or 10_000_000
    pending = total // 5
    tenants = bulk_tenants(b, 10_000)
    t0 = time.perf_counter()
    with b.conn() as c:
        for first in range(1, total + 1, 1_000_000):
            c.execute(BULK_SQL, {"first": first, "last": min(total, first + 999_999), "total": total,
                                  "pending": pending, "age": 0, "tenants": tenants, "n_tenants": len(tenants)})
        fill = time.perf_counter() - t0
        c.execute("VACUUM ANALYZE jobs")
        t1 = time.perf_counter()
        metrics.sample_depth(c)
        first_fold = time.perf_counter() - t1
        recounts = []
        for _ in range(3):
            t1 = time.perf_counter()
            c.execute(_RECOUNT_SQL).fetchall()
            recounts.append(time.perf_counter() - t1)
        groups = c.execute("SELECT count(*) AS n FROM queue_depth").fetchone()["n"]
        b.add("depth", f"old sampler: full recount at {total:,} jobs", statistics.median(recounts) * 1000, "ms",
              f"{pending:,} pending, {len(tenants):,} tenants; median of 3")
        b.add("depth", "first fold after the bulk fill", first_fold * 1000, "ms", f"{groups:,} groups")
        # The hot path, triggers on and off in alternate rounds of claim + complete.
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        timing: dict[bool, list[float]] = {True: [], False: []}
        wal: dict[bool, list[int]] = {True: [], False: []}
        batch, rounds = 64, 40
        for i in range(rounds):
            on = i % 2 == 0
            c.execute(f"ALTER TABLE jobs {'ENABLE' if on else 'DISABLE'} TRIGGER jobs_count_deltas_update")
            c.execute(f"ALTER TABLE jobs {'ENABLE' if on else 'DISABLE'} TRIGGER jobs_count_deltas_insert")
            start = c.execute("SELECT pg_current_wal_insert_lsn() AS l").fetchone()["l"]
            t1 = time.perf_counter()
            with c.transaction():
                xid = c.execute("SELECT txid_current() AS x").fetchone()["x"]
                jobs = jobqueue.claim_batch(c, "default", "bench", batch, 30)
            with c.transaction():
                xid2 = c.execute("SELECT txid_current() AS x").fetchone()["x"]
                jobqueue.record_outcomes(c, "bench", [jobqueue.OutcomeRecord(
                    j["id"], j["attempts"], "succeeded" if k % 8 else "retryable", j["started_at"], delay=60,
                    code=None if k % 8 else "http_503") for k, j in enumerate(jobs)])
            with c.transaction():
                xid3 = c.execute("SELECT txid_current() AS x").fetchone()["x"]
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[(i * batch + k) % len(tenants)])
                                          for k in range(batch)])
            timing[on].append((time.perf_counter() - t1) / len(jobs))
            wal[on].append(sum(_wal_of_xact(c, start, x) for x in (xid, xid2, xid3)) // len(jobs))
        c.execute("ALTER TABLE jobs ENABLE TRIGGER jobs_count_deltas_update")
        c.execute("ALTER TABLE jobs ENABLE TRIGGER jobs_count_deltas_insert")
        metrics.depth_repair(c)  # the rounds without triggers were not counted
        on_ms, off_ms = statistics.median(timing[True]) * 1000, statistics.median(timing[False]) * 1000
        b.add("depth", "claim+complete+enqueue per job, triggers on", on_ms, "ms",
              f"median of {rounds // 2} rounds of {batch}")
        b.add("depth", "claim+complete+enqueue per job, triggers off", off_ms, "ms",
              f"alternating rounds; ratio on/off {on_ms / off_ms:.3f}")
        b.add("depth", "WAL per job, triggers on", statistics.median(wal[True]), "bytes", "pg_walinspect, own xids")
        b.add("depth", "WAL per job, triggers off", statistics.median(wal[False]), "bytes", "pg_walinspect, own xids")
        # The fold after the rounds with triggers on, then the reads the pages and /metrics run.
        metrics.sample_depth(c)
        deltas = []
        for i in range(5):
            with c.transaction():
                jobs = jobqueue.claim_batch(c, "default", "bench", 1000, 30)
            jobqueue.record_outcomes(c, "bench", [jobqueue.OutcomeRecord(j["id"], j["attempts"], "succeeded",
                                                                         j["started_at"]) for j in jobs])
        deltas = c.execute("SELECT count(*) AS n FROM job_count_deltas").fetchone()["n"]
        t1 = time.perf_counter()
        metrics.sample_depth(c)
        fold = time.perf_counter() - t1
        b.add("depth", "fold after 5,000 claims + completions", fold * 1000, "ms", f"{deltas:,} delta rows")
        folds = []
        for _ in range(5):
            t1 = time.perf_counter()
            metrics.sample_depth(c)
            folds.append(time.perf_counter() - t1)
        b.add("depth", "fold with nothing new", statistics.median(folds) * 1000, "ms", "median of 5")
        reads = []
        for _ in range(5):
            t1 = time.perf_counter()
            metrics.queue_health(c, TenantScope(all=True))
            metrics.tenant_backlog_page(c, TenantScope(all=True))
            reads.append(time.perf_counter() - t1)
        b.add("depth", "queue health + tenant backlog reads", statistics.median(reads) * 1000, "ms",
              f"median of 5, {groups:,} groups")
        t1 = time.perf_counter()
        drift = metrics.depth_drift(c)
        check = time.perf_counter() - t1
        b.add("depth", "self-check (full recount vs maintained)", check * 1000, "ms",
              f"{len(drift)} groups differ")
        if drift:
            raise RuntimeError(f"maintained depth differs from the recount: {drift[:5]}")
    print(f"  (filled {total:,} jobs in {fill:.0f} s)")
    b.reset()

