"""The enqueue scenarios: ``enqueue_single`` and ``enqueue_many`` (jobs/s), and ``enqueue_cost``.

``opsboard bench --scenario enqueue_cost``: what one enqueue costs, per job, in figures a busy machine does not move.

Wall-clock enqueue rates on a shared 2-core machine swing several-fold with the
load (``--peers``' single-enqueue ratio read 0.81, 1.62 and 1.05 in three runs).
This scenario measures instead, for single enqueues (one autocommit statement
each, as ``--peers`` does) and for ``enqueue_many`` (1,000 per transaction):

* WAL bytes and records per job, from ``pg_walinspect`` restricted to the
  transactions that touched this database (other sessions' WAL left out; full
  page images, which depend on when the last checkpoint ran, counted apart);
* the server backend's CPU per job (``/proc/PID/stat``: only when PostgreSQL runs
  on this host; a ``-`` otherwise);
* the producer's own CPU per job (``time.process_time``).

With pgqueuer installed (``pip install 'opsboard[bench]'``) the same figures for
its ``enqueue`` (asyncpg) follow, in a scratch database of its own.
"""
from __future__ import annotations

import asyncio
import os
import time

import psycopg
from psycopg.conninfo import make_conninfo

from opsboard import jobqueue

from .harness import Bench

_HZ = os.sysconf("SC_CLK_TCK")


def enqueue_single(b: Bench) -> None:
    """Single-job enqueue, one transaction each (default 3,000 jobs)."""
    n = b.jobs or 3000
    (tenant,) = b.tenants(1)
    with b.conn() as c:
        t0 = time.perf_counter()
        for i in range(n):
            with c.transaction():
                jobqueue.enqueue(c, "diag.noop", {}, tenant=tenant)
        elapsed = time.perf_counter() - t0
    b.add("enqueue", "single-job transactions", n / elapsed, "jobs/s", f"{n} jobs")
    b.reset()


def enqueue_many(b: Bench) -> None:
    """enqueue_many, 1,000 jobs per transaction (default 100,000 jobs)."""
    n = b.jobs or 100_000
    batch = 1000
    tenants = b.tenants(10)
    jobs = [jobqueue.NewJob("diag.noop", {"i": i}, tenants[i % len(tenants)]) for i in range(n)]
    with b.conn() as c:
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            with c.transaction():
                jobqueue.enqueue_many(c, jobs[i:i + batch])
        elapsed = time.perf_counter() - t0
    b.add("enqueue", f"enqueue_many ({batch}/transaction)", n / elapsed, "jobs/s", f"{n} jobs")
    b.reset()


def backend_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of server process ``pid``, or None when it is not on this host."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _HZ
    except (OSError, IndexError, ValueError):
        return None


def own_wal(admin: psycopg.Connection, start, end) -> tuple[int, int, int]:
    """(bytes without full-page images, full-page image bytes, records) written between ``start`` and ``end``
    by the transactions that wrote a block of ``admin``'s database."""
    dboid = admin.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    row = admin.execute(
        "WITH w AS (SELECT * FROM pg_get_wal_records_info(%s, %s)), "
        "x AS (SELECT DISTINCT xid FROM w WHERE block_ref LIKE %s AND xid::text <> '0') "
        "SELECT coalesce(sum(record_length - fpi_length), 0), coalesce(sum(fpi_length), 0), count(*) "
        "FROM w WHERE xid IN (SELECT xid FROM x)", (start, end, f"%/{dboid}/%")).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def hold_wal(admin: psycopg.Connection, tag: str) -> None:
    """Keep the WAL from here on until ``admin`` closes (a temporary replication slot): a checkpoint that
    another session's writes bring on would otherwise recycle the segments before they are read."""
    admin.execute("SELECT pg_create_physical_replication_slot(%s, true, true)", (f"opsboard_bench_{tag}_{os.getpid()}",))


class Meter:
    """WAL, server CPU and client CPU of one measured stretch, per job."""

    def __init__(self, admin: psycopg.Connection, backend_pid: int):
        self.admin, self.pid = admin, backend_pid

    def __enter__(self):
        self.lsn = self.admin.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        self.server, self.client = backend_cpu(self.pid), time.process_time()
        return self

    def __exit__(self, *exc):
        self.client = time.process_time() - self.client
        server = backend_cpu(self.pid)
        self.server = None if server is None or self.server is None else server - self.server
        end = self.admin.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        self.wal, self.fpi, self.records = own_wal(self.admin, self.lsn, end)

    def report(self, b, label: str, n: int) -> None:
        b.add("enqueue_cost", f"{label}: WAL per job", self.wal / n, "bytes",
              f"{self.records / n:.2f} records/job; full-page images {self.fpi / n:,.0f} B/job apart")
        if self.server is not None:
            b.add("enqueue_cost", f"{label}: server CPU per job", self.server / n * 1e6, "µs", f"{n:,} jobs")
        b.add("enqueue_cost", f"{label}: producer CPU per job", self.client / n * 1e6, "µs", f"{n:,} jobs")


def enqueue_cost(b) -> None:
    """Per job: WAL bytes and records, server and producer CPU, for single enqueues (--jobs N, default 2,000)
    and enqueue_many (20 x 1,000); pgqueuer's enqueue beside them when it is installed."""
    single, batch = b.jobs or 2000, 20_000
    tenants = b.tenants(10)
    with psycopg.connect(b.url, autocommit=True) as admin, b.conn() as c:
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        hold_wal(admin, "ops")
        pid = c.execute("SELECT pg_backend_pid() AS p").fetchone()["p"]
        for i in range(20):  # prepared statements and warm caches, as a running producer has them
            jobqueue.enqueue(c, "diag.noop", {}, tenant=tenants[i % 10])
        with Meter(admin, pid) as m:
            for i in range(single):
                jobqueue.enqueue(c, "diag.noop", {}, tenant=tenants[i % 10])
        m.report(b, "opsboard single", single)
        jobs = [jobqueue.NewJob("diag.noop", {"i": i}, tenants[i % 10]) for i in range(batch)]
        with Meter(admin, pid) as m:
            for i in range(0, batch, 1000):
                with c.transaction():
                    jobqueue.enqueue_many(c, jobs[i:i + 1000])
        m.report(b, "opsboard batch", batch)
    b.reset()
    _pgqueuer_cost(b, single, batch)


def _pgqueuer_cost(b, single: int, batch: int) -> None:
    try:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries
    except ImportError:
        print("  (pgqueuer/asyncpg not installed: pip install 'opsboard[bench]'; its figures are skipped)")
        return
    from .peers import _as_url
    with psycopg.connect(b.url, autocommit=True) as c:
        name = c.execute("SELECT current_database()").fetchone()[0] + "_pgq"
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(b.url, dbname=name)
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            hold_wal(admin, "pgq")

            async def run():
                conn = await asyncpg.connect(_as_url(url))
                try:
                    q = Queries(AsyncpgDriver(conn))
                    await q.install()
                    pid = await conn.fetchval("SELECT pg_backend_pid()")
                    for _ in range(20):
                        await q.enqueue("noop", None, 0)
                    with Meter(admin, pid) as m1:
                        for _ in range(single):
                            await q.enqueue("noop", None, 0)
                    with Meter(admin, pid) as m2:
                        for _ in range(0, batch, 1000):
                            await q.enqueue(["noop"] * 1000, [None] * 1000, [0] * 1000)
                    return m1, m2
                finally:
                    await conn.close()

            m1, m2 = asyncio.run(run())
            m1.report(b, "pgqueuer single", single)
            m2.report(b, "pgqueuer batch", batch)
    finally:
        with psycopg.connect(b.url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
