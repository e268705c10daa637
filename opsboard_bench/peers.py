"""``opsboard bench --peers``: opsboard beside pgqueuer and a bare SKIP LOCKED loop, in one run.

Same method for every system: each in its own fresh database on the same
server; no-op jobs; workers in their own processes, started and idle before
"GO"; the jobs are enqueued beforehand (1,000 per statement) in one open
transaction, and GO is its COMMIT: every job becomes visible at once and the
system's own enqueue notification wakes the workers; processing is timed
from GO to the last completion committed, by the database's clock.  (Holding
jobs with a future due time and making them due with one UPDATE at GO left
20,000 dead index entries that every claim then walked: opsboard and
pgqueuer both ran 3 to 10 times slower than after a plain enqueue.)  Columns: batch enqueue (1,000 per transaction), single
enqueue (one transaction each), processing with 1 and 2 workers, idle
enqueue->start latency p50 / p99 (one job every 10-30 ms), and how many jobs
each worker handled in the 2-worker run.

pgqueuer is optional (``pip install 'opsboard[bench]'``); without it, its rows
are skipped.  The bare loop claims and finishes up to 100 due rows in one
``UPDATE ... FOR UPDATE SKIP LOCKED LIMIT 100`` statement: a ceiling, not a queue.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from opsboard import auth, jobqueue
from opsboard.config import ROOT, Config
from opsboard.db import connect, resolve_url
from opsboard.migrate import migrate

from .harness import Result, goal_mark, percentile
from .peer_workers import BARE_SCHEMA



def peer_goals(rows) -> list[Result]:
    """Issues 24's and 47's ratios of an ``opsboard bench --peers`` run (rows of this module: ``system``,
    ``batch``, ``single``, ``p1``, ``p2``, ``p99``, ``cpu_us``), one Result per opsboard row and goal,
    printed beside the goal."""
    def find(prefix):
        return next((r for r in rows if r.system.startswith(prefix)), None)

    def ratio(a, b):
        return a / b if a and b else float("nan")

    bare, pgq = find("bare"), find("pgqueuer")
    out = []
    for o in (r for r in rows if r.system.startswith("opsboard")):
        for metric, value in (("2 workers / bare loop's 2 workers", ratio(o.p2, bare and bare.p2)),
                              ("2 workers / 1 worker", ratio(o.p2, o.p1)),
                              ("single enqueue / pgqueuer's", ratio(o.single, pgq and pgq.single)),
                              ("batch enqueue / pgqueuer's", ratio(o.batch, pgq and pgq.batch)),
                              # issue 47: CPU per job near the bare loop's, enqueue near commit speed
                              ("CPU per job, 1 worker / bare loop's", ratio(o.cpu_us.get(1),
                                                                            bare and bare.cpu_us.get(1))),
                              ("CPU per job, 2 workers / own 1 worker", ratio(o.cpu_us.get(2), o.cpu_us.get(1))),
                              ("single enqueue / bare loop's", ratio(o.single, bare and bare.single)),
                              ("batch enqueue / bare loop's", ratio(o.batch, bare and bare.batch)),
                              ("idle p99 / pgqueuer's", ratio(o.p99, pgq and pgq.p99)),
                              ("2 workers / pgqueuer's 2 workers", ratio(o.p2, pgq and pgq.p2)),
                              # the same two CPU ratios from the systems' own CPU (workers + backends):
                              # no goal, but on a machine other work keeps busy the only readable ones
                              ("own CPU per job, 1 worker / bare loop's", ratio(o.own_us.get(1),
                                                                                bare and bare.own_us.get(1))),
                              ("own CPU per job, 2 workers / own 1 worker", ratio(o.own_us.get(2),
                                                                                  o.own_us.get(1)))):
            out.append(Result("peers", metric, round(value, 3), "×", o.system))
    if out:
        print("\nissues 24's and 47's goals:")
        for r in out:
            print(f"  {r.note:<36} {r.metric:<42} {r.value:>6.2f}×  "
                  + (f"goal {r.goal:<8} {goal_mark(r.met)}" if r.goal else "(no goal)"))
    return out


@dataclass
class Row:
    system: str
    batch: float | None = None
    single: float | None = None
    p1: float | None = None
    p2: float | None = None
    p50: float | None = None
    p99: float | None = None
    split: list[int] = field(default_factory=list)
    #: Share of the machine's CPU time busy while k workers processed (/proc/stat), by k.
    busy: dict[int, float] = field(default_factory=dict)
    #: Machine CPU (every process: workers, PostgreSQL, the rest) per processed job while k workers
    #: processed, in µs (/proc/stat busy ticks over the measured window / jobs), by k.
    cpu_us: dict[int, float] = field(default_factory=dict)
    #: The system's own CPU per job (its workers and their PostgreSQL backends), in µs, by k.
    own_us: dict[int, float] = field(default_factory=dict)


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat; ``None`` elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_since(start: tuple[int, int] | None) -> float | None:
    end = _cpu_ticks()
    if start is None or end is None or end[1] <= start[1]:
        return None
    return (end[0] - start[0]) / (end[1] - start[1])


class CpuWindow:
    """The CPU over a measured window.  The machine's, from /proc/stat's ticks: the busy share and
    the busy CPU seconds (every process on the host, PostgreSQL included; what the issue's goals
    read); ``None`` where unreadable.  With ``url`` and ``procs``, also the system's own
    (``own_seconds``): its worker processes and their PostgreSQL backends (those connected to its
    database, /proc/<pid>/stat), which other load on a shared machine does not inflate; ``None``
    when a backend cannot be read (a server on another host)."""

    def __init__(self, url: str | None = None, procs: "Procs | None" = None):
        self.url, self.procs = url, procs
        self.start = _cpu_ticks()
        self.own_start = self._own()
        self.share: float | None = None
        self.seconds: float | None = None
        self.own_seconds: float | None = None

    def _own(self) -> dict[int, float] | None:
        if self.url is None or self.procs is None:
            return None
        with psycopg.connect(self.url, autocommit=True) as c:
            backends = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity "
                                                "WHERE datname = current_database() AND pid <> pg_backend_pid()")]
        out = {}
        for pid in [p.pid for p in self.procs.procs] + backends:
            cpu = _process_cpu(pid)
            if cpu is None and pid in backends:
                return None
            if cpu is not None:
                out[pid] = cpu
        return out

    def stop(self) -> "CpuWindow":
        end = _cpu_ticks()
        if self.start is not None and end is not None and end[1] > self.start[1]:
            self.share = (end[0] - self.start[0]) / (end[1] - self.start[1])
            self.seconds = (end[0] - self.start[0]) / os.sysconf("SC_CLK_TCK")
        own_end = self._own()
        if self.own_start is not None and own_end is not None:
            # A backend that connected during the window counts from zero.
            self.own_seconds = sum(v - self.own_start.get(pid, 0.0) for pid, v in own_end.items())
        return self


def _process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads) so far, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_us_per_job(seconds: float | None, jobs: int) -> float | None:
    """Machine CPU µs per job for ``seconds`` of busy CPU over ``jobs`` processed jobs."""
    if seconds is None or not jobs:
        return None
    return seconds * 1e6 / jobs


def _env() -> dict:
    e = dict(os.environ)
    e.update({"OPSBOARD_ENV": "development", "OPSBOARD_LOG_FORMAT": "text", "PYTHONPATH": str(ROOT)})
    return e


class Procs:
    """Worker processes started before GO; each says ``ready`` (peers) or registers (opsboard)."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def peer(self, kind: str, url: str, n: int) -> None:
        for i in range(n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "opsboard_bench.peer_workers", kind, url, f"{kind}-{i}"],
                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in self.procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"{kind} worker did not start: {line}{p.stderr.read()[-2000:]}")

    def opsboard(self, url: str, n: int, queues: str) -> None:
        """Start ``n`` workers and return once each has logged ``worker started``: its presence row is
        written before its start hooks (the shipped templates validated and compiled: a fifth of a
        worker's Python time in a 40,000-job profile under load, issue 47) and its threads, so waiting
        for the row alone let that start-up fall inside the timed window (rate and CPU per job)."""
        started = []
        for i in range(n):
            e = _env()
            e["DATABASE_URL"] = url
            p = subprocess.Popen([sys.executable, "-m", "worker", "--queues", queues, "--id", f"bench-{i}"],
                                 env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            p.log = collections.deque(maxlen=200)  # the last lines of its stderr, read all along
            ready = threading.Event()
            p.drain = threading.Thread(target=_drain, args=(p, ready), daemon=True)
            p.drain.start()
            self.procs.append(p)
            started.append(ready)
        deadline = time.monotonic() + 60
        for p, ready in zip(self.procs[-n:], started):
            while not ready.wait(0.05):
                if time.monotonic() > deadline or p.poll() is not None:
                    raise RuntimeError("opsboard workers did not start: " + "".join(p.log)[-2000:])
        with connect(url) as c:
            if c.execute("SELECT count(*) AS n FROM workers").fetchone()["n"] < n:
                raise RuntimeError("opsboard workers started without their presence rows")

    def stop(self) -> list[dict]:
        """SIGTERM every worker; returns what the peers reported (``{}`` for opsboard workers)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        out = []
        for p in self.procs:
            if getattr(p, "drain", None) is not None:  # an opsboard worker: its stderr is being read
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                p.drain.join(5)
                out.append({})
                continue
            try:
                stdout, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout = ""
            report = {}
            for line in (stdout or "").splitlines():
                if line.startswith("{"):
                    report = json.loads(line)
            out.append(report)
        self.procs.clear()
        return out


def _drain(p: subprocess.Popen, ready: threading.Event) -> None:
    """Read an opsboard worker's stderr to its end (a pipe nobody reads would stop a worker that logs
    much), keeping its last lines; set ``ready`` at its ``worker started`` line."""
    for line in p.stderr:
        p.log.append(line)
        if not ready.is_set() and "worker started" in line:
            ready.set()


def _as_url(conninfo: str) -> str:
    """A libpq key=value string as a postgresql:// URL (asyncpg takes only URLs)."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        return conninfo
    from urllib.parse import quote
    d = conninfo_to_dict(conninfo)
    auth_part = quote(d.get("user", "postgres"))
    if d.get("password"):
        auth_part += ":" + quote(d["password"])
    return f"postgresql://{auth_part}@{d.get('host', '127.0.0.1')}:{d.get('port', 5432)}/{d['dbname']}"


def _record_run(row, workers: int, rate: float, reports: list[dict], cpu: CpuWindow | None = None,
                jobs: int = 0) -> None:
    """One processing run's rate into ``row`` (1 or 2 workers; with 2, each worker's share), the
    machine's busy CPU share meanwhile and its CPU per job."""
    if cpu is not None and cpu.share is not None:
        row.busy[workers] = cpu.share
        row.cpu_us[workers] = cpu_us_per_job(cpu.seconds, jobs)
    if cpu is not None and cpu.own_seconds is not None:
        row.own_us[workers] = cpu_us_per_job(cpu.own_seconds, jobs)
    if workers == 1:
        row.p1 = rate
    else:
        row.p2 = rate
        row.split = sorted((r.get("handled", 0) for r in reports), reverse=True)


def _wait(url: str, sql: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as c:
        while c.execute(sql).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not done after {timeout}s: {sql}")
            time.sleep(0.1)


def _exec(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql)


def _scalar(url: str, sql: str):
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute(sql).fetchone()[0]


# ---------------------------------------------------------------- opsboard

#: Whether any job is unfinished, read through the partial indexes: the wait loop polls it every
#: 0.1 s while the workers run, and a count over the whole table cost the server 3.5 ms a poll.
OPS_UNFINISHED = ("SELECT EXISTS (SELECT 1 FROM jobs WHERE status IN ('pending', 'retryable')) "
                  "OR EXISTS (SELECT 1 FROM jobs WHERE status = 'running')")

def _ops_fill(c, n: int, tenants: list) -> None:
    for i in range(0, n, 1000):
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[j % len(tenants)])
                               for j in range(i, min(n, i + 1000))])


def opsboard_system(url: str, jobs: int, single: int, lat: int, slots: int, enqueue: bool) -> Row:
    row = Row(f"opsboard, default={slots}" + (" (out of the box)" if slots == 8 else ""))
    queues = f"critical=2,default={slots},bulk=2"
    with connect(url) as c:
        tenants = [auth.ensure_tenant(c, f"bench-{i}", f"Bench {i}")["id"] for i in range(10)]
    reset = "TRUNCATE jobs, job_attempts, job_stats, effects, workers CASCADE"
    if enqueue:
        js = [jobqueue.NewJob("diag.noop", {"i": i}, tenants[i % 10]) for i in range(jobs)]
        with connect(url) as c:
            t0 = time.perf_counter()
            for i in range(0, jobs, 1000):
                with c.transaction():
                    jobqueue.enqueue_many(c, js[i:i + 1000])
            row.batch = jobs / (time.perf_counter() - t0)
            c.execute(reset)
            t0 = time.perf_counter()
            for i in range(single):  # autocommit: one statement, one transaction, as for the peers
                jobqueue.enqueue(c, "diag.noop", {}, tenant=tenants[i % 10])
            row.single = single / (time.perf_counter() - t0)
            c.execute(reset)
    for k in (1, 2):
        procs = Procs()
        try:
            with connect(url) as c:
                with c.transaction():
                    _ops_fill(c, jobs, tenants)
                    procs.opsboard(url, k, queues)
                    time.sleep(0.5)
                    cpu = CpuWindow(url, procs)
                    go = c.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").fetchone()["t"]
            _wait(url, OPS_UNFINISHED)
            cpu.stop()
        finally:
            procs.stop()
        end = _scalar(url, "SELECT extract(epoch FROM max(finished_at))::float8 FROM jobs")
        n_att = _scalar(url, "SELECT count(*) FROM job_attempts")
        if n_att != jobs:
            raise RuntimeError(f"opsboard: {n_att} attempt rows for {jobs} jobs")
        _record_run(row, k, jobs / (end - go), [], cpu, jobs)
        if k == 2:
            with psycopg.connect(url) as c:
                row.split = [r[0] for r in c.execute(
                    "SELECT count(*) FROM job_attempts GROUP BY worker ORDER BY 1 DESC")]
        with connect(url) as c:
            c.execute(reset)
    procs = Procs()
    try:
        procs.opsboard(url, 1, queues)
        time.sleep(0.5)
        rng = random.Random(7)
        with connect(url) as c:
            for i in range(lat):
                jobqueue.enqueue(c, "diag.noop", {}, tenant=tenants[i % 10])
                time.sleep(rng.uniform(0.01, 0.03))
        _wait(url, OPS_UNFINISHED)
    finally:
        procs.stop()
    with psycopg.connect(url) as c:
        ms = [float(r[0]) for r in c.execute("SELECT extract(epoch FROM started_at - created_at) * 1000 FROM jobs")]
        c.execute(reset)
    row.p50, row.p99 = percentile(ms, 50), percentile(ms, 99)
    return row


# ---------------------------------------------------------------- bare loop

def bare_system(url: str, jobs: int, single: int, lat: int) -> Row:
    row = Row("bare UPDATE ... SKIP LOCKED LIMIT 100 loop")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(BARE_SCHEMA)
    insert = "INSERT INTO bare_jobs (payload) SELECT p FROM unnest(%s::jsonb[]) AS p"
    with psycopg.connect(url) as c:
        docs = [json.dumps({"i": i}) for i in range(jobs)]
        t0 = time.perf_counter()
        for i in range(0, jobs, 1000):
            with c.transaction():
                c.execute(insert, (docs[i:i + 1000],))
        row.batch = jobs / (time.perf_counter() - t0)
        c.execute("TRUNCATE bare_jobs")
        c.commit()
        t0 = time.perf_counter()
        c.autocommit = True
        for i in range(single):
            c.execute("INSERT INTO bare_jobs (payload) VALUES ('{}')", prepare=True)
        row.single = single / (time.perf_counter() - t0)
        c.execute("TRUNCATE bare_jobs")
    for k in (1, 2):
        procs = Procs()
        try:
            with psycopg.connect(url) as c:
                for i in range(0, jobs, 1000):
                    c.execute(insert, ([docs[0]] * min(1000, jobs - i),))
                procs.peer("bare", url, k)
                time.sleep(0.5)
                cpu = CpuWindow(url, procs)
                go = c.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
                c.commit()
            _wait(url, "SELECT count(*) FROM bare_jobs WHERE status <> 'done'")
            cpu.stop()
        finally:
            reports = procs.stop()
        end = _scalar(url, "SELECT extract(epoch FROM max(finished_at))::float8 FROM bare_jobs")
        _record_run(row, k, jobs / (end - go), reports, cpu, jobs)
        _exec(url, "TRUNCATE bare_jobs")
    procs = Procs()
    try:
        procs.peer("bare", url, 1)
        time.sleep(0.5)
        rng = random.Random(7)
        with psycopg.connect(url, autocommit=True) as c:
            for _ in range(lat):
                c.execute("INSERT INTO bare_jobs (payload) VALUES ('{}')", prepare=True)
                time.sleep(rng.uniform(0.01, 0.03))
        _wait(url, "SELECT count(*) FROM bare_jobs WHERE status <> 'done'")
    finally:
        procs.stop()
    with psycopg.connect(url) as c:
        ms = [float(r[0]) for r in c.execute("SELECT extract(epoch FROM started_at - created_at) * 1000 "
                                              "FROM bare_jobs")]
    row.p50, row.p99 = percentile(ms, 50), percentile(ms, 99)
    return row


# ---------------------------------------------------------------- pgqueuer

def pgqueuer_system(url: str, jobs: int, single: int, lat: int) -> Row | None:
    try:
        import asyncpg
        import pgqueuer
        from pgqueuer import AsyncpgDriver, Queries
    except ImportError:
        print("  (pgqueuer/asyncpg not installed: pip install 'opsboard[bench]'; its row is skipped)")
        return None
    url = _as_url(url)
    row = Row(f"pgqueuer {pgqueuer.__version__} (asyncpg)")

    async def with_queries(fn):
        conn = await asyncpg.connect(url)
        try:
            return await fn(Queries(AsyncpgDriver(conn)), conn)
        finally:
            await conn.close()

    async def setup(q, conn):
        await q.install()

    async def enqueue_bench(q, conn):
        t0 = time.perf_counter()
        for i in range(0, jobs, 1000):
            k = min(1000, jobs - i)
            await q.enqueue(["noop"] * k, [None] * k, [0] * k)
        batch = jobs / (time.perf_counter() - t0)
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        t0 = time.perf_counter()
        for _ in range(single):
            await q.enqueue("noop", None, 0)
        one = single / (time.perf_counter() - t0)
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        return batch, one

    async def idle_latency(q, conn):
        rng = random.Random(7)
        for _ in range(lat):
            await q.enqueue("noop", None, 0)
            await asyncio.sleep(rng.uniform(0.01, 0.03))

    asyncio.run(with_queries(setup))
    row.batch, row.single = asyncio.run(with_queries(enqueue_bench))
    done = "SELECT count(*) FROM pgqueuer"

    def timed_run(k: int, procs: Procs) -> tuple[float, CpuWindow]:
        async def run(q, conn):
            tr = conn.transaction()
            await tr.start()
            for i in range(0, jobs, 1000):
                n = min(1000, jobs - i)
                await q.enqueue(["noop"] * n, [None] * n, [0] * n)
            procs.peer("pgqueuer", url, k)
            await asyncio.sleep(0.5)
            cpu = CpuWindow(url, procs)
            go = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
            await tr.commit()
            return go, cpu
        return asyncio.run(with_queries(run))

    for k in (1, 2):
        procs = Procs()
        try:
            go, cpu = timed_run(k, procs)
            _wait(url, done)
            cpu.stop()
            # Completion logs are written in batches: let the last one land.
            deadline = time.monotonic() + 10
            while _scalar(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'") < jobs \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            reports = procs.stop()
        end = _scalar(url, "SELECT extract(epoch FROM max(created))::float8 FROM pgqueuer_log "
                           "WHERE status = 'successful'")
        _record_run(row, k, jobs / (end - go), reports, cpu, jobs)
        _exec(url, "TRUNCATE pgqueuer, pgqueuer_log")
    procs = Procs()
    try:
        procs.peer("pgqueuer", url, 1)
        time.sleep(0.5)
        asyncio.run(with_queries(idle_latency))
        _wait(url, done)
    finally:
        reports = procs.stop()
    ms = reports[0].get("latency_ms", []) if reports else []
    row.p50, row.p99 = percentile(ms, 50), percentile(ms, 99)
    return row


# ---------------------------------------------------------------- the table

def _fmt(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _cpu(r: "Row", k: int) -> str:
    """Machine CPU per job with k workers, and the system's own (workers + backends) beside it."""
    own = r.own_us.get(k)
    return _fmt(r.cpu_us.get(k), 1) + ("" if own is None else f" (own {own:,.1f})")


def _ratio(a: float | None, b: float | None, lower_is_better: bool = False) -> str:
    if not a or not b:
        return "-"
    return f"{(b / a if lower_is_better else a / b):.2f}x"


def print_table(rows: list[Row]) -> None:
    print()
    print("| system | batch enqueue/s | single enqueue/s | process 1 worker/s | CPU µs/job, 1 worker "
          "| process 2 workers/s | CPU µs/job, 2 workers | idle p50 / p99 ms | 2-worker split |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.system} | {_fmt(r.batch)} | {_fmt(r.single)} | {_fmt(r.p1)} | {_cpu(r, 1)} "
              f"| {_fmt(r.p2)} | {_cpu(r, 2)} "
              f"| {_fmt(r.p50, 2)} / {_fmt(r.p99, 2)} | {' / '.join(f'{n:,}' for n in r.split)} |")
    ops = [r for r in rows if r.system.startswith("opsboard")]
    peers = [r for r in rows if not r.system.startswith("opsboard")]
    print()
    print("opsboard / peer (above 1.00x is opsboard ahead; latency: peer's p99 / opsboard's p99):")
    for o in ops:
        for p in peers:
            bare = p.system.startswith("bare")
            goals = PEER_GOALS["bare" if bare else "pgqueuer"]
            print(f"  {o.system} vs {p.system}: batch {_ratio(o.batch, p.batch)}{_goal(o.batch, p.batch, goals, 'batch')}, "
                  f"single {_ratio(o.single, p.single)}{_goal(o.single, p.single, goals, 'single')}, "
                  f"1 worker {_ratio(o.p1, p.p1)}, 2 workers {_ratio(o.p2, p.p2)}{_goal(o.p2, p.p2, goals, 'p2')}, "
                  f"idle p99 {_ratio(o.p99, p.p99, lower_is_better=True)}")
    for o in ops:
        fair = (o.split[0] / o.split[-1]) if len(o.split) == 2 and o.split[-1] else float("inf")
        print(f"  {o.system}: 2 workers / 1 worker {_ratio(o.p2, o.p1)}{_goal(o.p2, o.p1, PEER_GOALS['self'], 'p2')}; "
              f"busiest worker / other {fair:.2f}")
    busy = [r for r in rows if r.busy]
    if busy:
        # A second worker can only add what the first left idle: with the machine's cores already busy
        # (workers and PostgreSQL on one host), 2 workers / 1 worker stays near 1.
        print(f"machine CPU busy while processing ({os.cpu_count()} CPUs, /proc/stat: workers, PostgreSQL and the rest):")
        for r in busy:
            print(f"  {r.system}: " + ", ".join(f"{k} worker{'s' if k > 1 else ''} {v * 100:.0f} %"
                                                for k, v in sorted(r.busy.items())))
        # At a CPU cost per job no lower with 2 workers than with 1 (both walk the same tenants' heads),
        # 2 workers reach at most the whole machine: 1 / (the share 1 worker kept busy) times its rate.
        for r in busy:
            if r.system.startswith("opsboard") and r.busy.get(1):
                print(f"  {r.system}: 2 workers / 1 worker at most {two_worker_ceiling(r.busy[1]):.2f}x "
                      "at one worker's CPU per job (all cores / the share one worker kept busy)")


def two_worker_ceiling(busy_one: float) -> float:
    """The most 2 workers / 1 worker can reach on this machine when a job costs 2 workers no less CPU
    than it costs 1: the whole machine over the share of it one worker (and its backends) kept busy."""
    return 1 / busy_one if busy_one > 0 else float("nan")


#: Issue 24's goals for opsboard's ratios (opsboard / peer, higher is better), printed beside them.
PEER_GOALS = {"pgqueuer": {"batch": 1.5, "single": 1.2}, "bare": {"p2": 0.5}, "self": {"p2": 1.3}}


def _goal(a: float | None, b: float | None, goals: dict, key: str) -> str:
    """`` (goal >= 1.30x: met)`` for a ratio with a goal, else ``""``."""
    goal = goals.get(key)
    if goal is None or not a or not b:
        return ""
    return f" (goal >= {goal:.2f}x: {'met' if a / b >= goal else 'not met'})"


def run_peers(config: Config, jobs: int | None = None, json_path: str | None = None,
              single: int = 2000, latency: int = 200) -> int:
    jobs = jobs or 20_000
    server = resolve_url(config)
    systems: list[tuple[str, Callable[[str], Row | None], bool]] = [
        ("ops64", lambda u: opsboard_system(u, jobs, single, latency, 64, True), True),
        ("ops8", lambda u: opsboard_system(u, jobs, single, latency, 8, False), True),
        ("pgq", lambda u: pgqueuer_system(u, jobs, single, latency), False),
        ("bare", lambda u: bare_system(u, jobs, single, latency), False),
    ]
    print(f"opsboard bench --peers: {jobs:,} no-op jobs, {single:,} single enqueues, {latency} idle jobs; "
          f"{os.cpu_count()} CPUs (numbers from one run: compare the rows, not other machines)", flush=True)
    rows: list[Row] = []
    for tag, fn, migrated in systems:
        name = f"opsboard_peers_{tag}_{os.getpid()}"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = make_conninfo(server, dbname=name)
        try:
            if migrated:
                migrate(url, log=lambda *_: None)
            t0 = time.monotonic()
            row = fn(url)
            if row is not None:
                print(f"  {row.system}: done in {time.monotonic() - t0:.0f} s", flush=True)
                rows.append(row)
        finally:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    # The default=8 row shares the enqueue figures measured for opsboard (slots do not enqueue).
    if len(rows) >= 2 and rows[1].system.startswith("opsboard"):
        rows[1].batch, rows[1].single = rows[0].batch, rows[0].single
    print_table(rows)
    goals = peer_goals(rows)  # issues 24's and 47's ratios beside their goals
    if json_path:
        # {"rows": [{system, batch, single, p1, p2, p50, p99, split, busy, cpu_us, own_us}], "goals": [Result]}:
        # busy, cpu_us and own_us are keyed by the number of workers.
        with open(json_path, "w") as f:
            json.dump({"rows": [r.__dict__ for r in rows], "goals": [g.__dict__ for g in goals]}, f, indent=2)
        print(f"wrote {json_path}")
    return 0
