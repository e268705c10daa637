"""The processing scenarios: no-op jobs drained by real worker processes (``process_1``, ``process_2``,
``process_slots``), enqueue -> start on an idle queue (``latency_idle``), and OTP under a flood of slow
jobs (``otp_flood``)."""
from __future__ import annotations

import random
import time

from opsboard import jobqueue

from .harness import Bench, percentile

#: Worker slots used by the processing scenarios (no-op handlers are cheap, so
#: more slots than cores keep the claim pipeline full).
BENCH_QUEUES = "critical=2,default=64,bulk=2"


def _process(b: Bench, workers: int, queues: str | None = None) -> None:
    queues = queues or BENCH_QUEUES
    n = b.jobs or 20_000
    tenants = b.tenants(10)
    with b.conn() as c:
        for i in range(0, n, 5000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[j % 10]) for j in range(i, min(n, i + 5000))])
        c.execute("VACUUM ANALYZE jobs")
    with b.conn() as c:
        wal_start = c.execute("SELECT pg_current_wal_lsn() AS l").fetchone()["l"]
    b.start_workers(workers, queues)
    b.wait_done(n)
    b.stop_workers()
    with b.conn() as c:
        wal = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s) AS d", (wal_start,)).fetchone()["d"]
        row = c.execute("""SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs,
                                  (SELECT count(*) FROM job_attempts) AS attempts
                           FROM jobs WHERE status = 'succeeded'""").fetchone()
    if row["n"] != n or row["attempts"] != n:
        raise RuntimeError(f"expected {n} succeeded jobs with one attempt each, got {row['n']} / {row['attempts']}")
    b.add("process", f"no-op jobs, {workers} worker process{'es' if workers > 1 else ''}",
          n / float(row["secs"]), "jobs/s", f"{n} jobs, --queues {queues}")
    if workers == 2 and queues == BENCH_QUEUES:
        b.add("process", "WAL written per processed job", float(wal) / n, "bytes",
              "claim + outcome + attempt row + stats")
    b.reset()


def process_1(b: Bench) -> None:
    """No-op jobs with 1 worker process (default 20,000 pre-enqueued jobs)."""
    _process(b, 1)


def process_2(b: Bench) -> None:
    """No-op jobs with 2 worker processes (default 20,000 pre-enqueued jobs)."""
    _process(b, 2)


def process_slots(b: Bench) -> None:
    """No-op processing with 2 workers at 8, 16, 32, 64 and 128 default slots each."""
    for slots in (8, 16, 32, 64, 128):
        _process(b, 2, f"critical=2,default={slots},bulk=2")


def latency_idle(b: Bench) -> None:
    """Enqueue->start latency on an idle queue, one job every 10-30 ms (default 200 jobs)."""
    n = b.jobs or 200
    (tenant,) = b.tenants(1)
    b.start_workers(1, BENCH_QUEUES)
    time.sleep(0.5)  # let the worker settle into its idle wait
    rng = random.Random(7)
    with b.conn() as c:
        for _ in range(n):
            with c.transaction():
                jobqueue.enqueue(c, "diag.noop", {}, tenant=tenant)
            time.sleep(rng.uniform(0.01, 0.03))
    b.wait_done(n)
    b.stop_workers()
    with b.conn() as c:
        # created_at is the enqueueing transaction's start, started_at the claim's: both DB clock.
        lat = [r["ms"] for r in c.execute(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs")]
    lat = [float(x) for x in lat]
    b.add("latency", "enqueue->start p50, idle queue", percentile(lat, 50), "ms", f"{n} jobs")
    b.add("latency", "enqueue->start p99, idle queue", percentile(lat, 99), "ms", f"{n} jobs")
    b.reset()



def otp_flood(b: Bench) -> None:
    """50,000 slow default/bulk jobs backlogged, OTP at 20/s: OTP enqueue->start p50/p99."""
    backlog = b.jobs or 50_000
    tenants = b.tenants(4)
    with b.conn() as c:
        for i in range(0, backlog, 5000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.sleep", {"ms": 50}, tenants[j % 4],
                                                    queue="bulk" if j % 3 == 0 else "default")
                                       for j in range(i, min(backlog, i + 5000))])
        c.execute("VACUUM ANALYZE jobs")
    b.start_workers(1, "critical=2,default=8,bulk=2")
    time.sleep(2.0)  # the default and bulk slots are busy with the backlog by now
    otp = 200
    with b.conn() as c:
        next_at = time.monotonic()
        for i in range(otp):
            with c.transaction():
                jobqueue.enqueue(c, "diag.sleep", {"ms": 5}, version=2, tenant=tenants[i % 4])
            next_at += 1 / 20
            time.sleep(max(0.0, next_at - time.monotonic()))
        deadline = time.monotonic() + 30
        while c.execute("SELECT count(*) AS n FROM jobs WHERE queue = 'critical' AND status <> 'succeeded'"
                        ).fetchone()["n"] and time.monotonic() < deadline:
            time.sleep(0.1)
        lat = [float(r["ms"]) for r in c.execute(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM jobs "
            "WHERE queue = 'critical' AND started_at IS NOT NULL")]
        waiting = c.execute("SELECT count(*) AS n FROM jobs WHERE queue <> 'critical' AND status = 'pending'"
                            ).fetchone()["n"]
    b.stop_workers()
    b.add("otp_flood", "OTP enqueue->start p50 under flood", percentile(lat, 50), "ms",
          f"{len(lat)} OTP at 20/s, {waiting} slow jobs still waiting")
    b.add("otp_flood", "OTP enqueue->start p99 under flood", percentile(lat, 99), "ms",
          "--queues critical=2,default=8,bulk=2")
    b.reset()

