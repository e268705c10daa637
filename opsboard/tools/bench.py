"""``opsboard bench``: measure the queue on this machine.

Not a test.  Each scenario runs in a scratch database (created on the
configured server, or the embedded one, and dropped afterwards), with the
full schema and real worker processes (``python -m worker``).  Timings of
processed jobs come from the database's own timestamps (``created_at``,
``started_at``, ``finished_at``), so the measurement does not include process
start-up or polling by the benchmark itself.

Prints a table; ``--json FILE`` writes
``{"machine": {...}, "results": [{"scenario", "metric", "value", "unit", "note", "goal", "met"}, ...]}``.
A figure with a goal (:data:`GOALS`, or ``goal=`` where it is added) shows it beside the value with
``met`` / ``NOT met`` (``met`` is null in the JSON when the figure is missing).
"""
from __future__ import annotations

import json
import operator
import os
import platform
import random
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .. import auth, jobqueue
from ..config import ROOT, Config
from ..db import connect, resolve_url
from ..migrate import migrate


@dataclass(frozen=True)
class Goal:
    """What a figure should reach: ``value <op> target`` (``op`` one of ``<  <=  >  >=  ==``)."""

    op: str
    target: float
    unit: str = ""

    _OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
    _SHOWN = {"<": "<", "<=": "≤", ">": ">", ">=": "≥", "==": "="}

    def met(self, value: float) -> bool | None:
        """Whether ``value`` reaches the goal; None when there is no figure (NaN: not measured)."""
        if value is None or value != value:
            return None
        return self._OPS[self.op](value, self.target)

    def text(self, unit: str = "") -> str:
        unit = self.unit or unit
        return f"{self._SHOWN[self.op]} {self.target:,g}" + (unit if unit == "×" else f" {unit}".rstrip())


#: The goals of the issues, by (scenario, metric) as the scenarios name their figures (one table, so that
#: the scenario modules need not change to carry them; ``tests/unit/test_bench_goals.py`` checks that each
#: metric is still named somewhere in opsboard/tools).  Issue 27: the notification tier; issue 24: the queue
#: beside its peers (``opsboard bench --peers``, ratios: :func:`peer_goals`).
GOALS: dict[tuple[str, str], Goal] = {
    # streams at 10,000 (the RSS goal is for 10,000 streams; smaller runs meet it trivially)
    ("streams", "commit -> every stream, p99"): Goal("<", 250),
    ("streams", "stream server memory (PSS)"): Goal("<", 1024),
    ("streams", "/healthz p99 meanwhile"): Goal("<", 100),
    ("streams", "dashboard page p99 meanwhile"): Goal("<", 100),
    # a broadcast to 600,000 members x 2 channels
    ("broadcast", "publish -> every inbox row and email job"): Goal("<=", 30),
    ("broadcast", "OTP enqueue -> start p99 meanwhile"): Goal("<", 20),
    ("broadcast", "other tenant: publish -> inbox p99"): Goal("<", 1000),
    # the events API
    ("api", "POST /events, 8 clients: throughput"): Goal(">=", 1000),
    ("api", "POST /events, 8 clients: p99"): Goal("<", 50),
    ("api", "4x overload: 5xx other than 503 / errors"): Goal("==", 0),
    # the events API beside its worker (wrk, a real worker draining to the sandbox)
    ("api_worker", "POST /events, 8 conns: accepted"): Goal(">=", 1000),
    ("api_worker", "POST /events, 8 conns: p99"): Goal("<", 50),
    ("api_worker", "accepted events not delivered to the sandbox"): Goal("==", 0),
    ("api_worker", "2xx whose event is missing"): Goal("==", 0),
    ("api_worker", "4x overload: 5xx (not 503) + socket errors"): Goal("==", 0),
    ("api_worker", "4x overload: 429/503 without Retry-After"): Goal("==", 0),
    ("api_worker", "4x overload: 2xx whose event is missing"): Goal("==", 0),
    # webhooks (the scenario runs 2 workers)
    ("webhooks", "signed deliveries, 100 endpoints, 10% down"): Goal(">=", 2000),
    # issue 24: the queue beside the bare loop and pgqueuer (ratios of one --peers run)
    ("peers", "2 workers / bare loop's 2 workers"): Goal(">=", 0.5, "×"),
    ("peers", "2 workers / 1 worker"): Goal(">=", 1.3, "×"),
    ("peers", "single enqueue / pgqueuer's"): Goal(">=", 1.2, "×"),
    ("peers", "batch enqueue / pgqueuer's"): Goal(">=", 1.5, "×"),
}


def cpu_ceiling(cores: int, cpu_seconds: float, items: float) -> float:
    """Items per second ``cores`` carry when ``items`` cost ``cpu_seconds`` of CPU in all: the rate of a
    run that keeps every core busy at this cost.  Beside a goal above it, it says that the goal needs
    less work per item on this machine, not less waiting (NaN when nothing was measured)."""
    if not items or items <= 0 or cpu_seconds is None or cpu_seconds <= 0:
        return float("nan")
    return cores * items / cpu_seconds


def goal_mark(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "no figure"}[met]


def peer_goals(rows) -> list[Result]:
    """Issue 24's ratios of an ``opsboard bench --peers`` run (rows of :mod:`.bench_peers`: ``system``,
    ``batch``, ``single``, ``p1``, ``p2``), one Result per opsboard row and goal, printed beside the goal."""
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
                              ("batch enqueue / pgqueuer's", ratio(o.batch, pgq and pgq.batch))):
            out.append(Result("peers", metric, round(value, 3), "×", o.system))
    if out:
        print("\nissue 24's goals:")
        for r in out:
            print(f"  {r.note:<36} {r.metric:<36} {r.value:>6.2f}×  goal {r.goal:<8} {goal_mark(r.met)}")
    return out


@dataclass
class Result:
    scenario: str
    metric: str
    value: float
    unit: str
    note: str = ""
    #: The goal as shown ("< 250 ms"), and whether the value reaches it (None: no goal, or no figure).
    goal: str = ""
    met: bool | None = None

    def __post_init__(self):
        g = GOALS.get((self.scenario, self.metric))
        if g is not None and not self.goal:
            self.goal, self.met = g.text(self.unit), g.met(self.value)


@dataclass
class Bench:
    """What a scenario gets: a scratch database, its URL, and helpers."""

    url: str
    config: Config
    jobs: int | None
    #: Open streams of the ``streams`` scenario (``--streams``).
    streams: int | None = None
    results: list[Result] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def add(self, scenario: str, metric: str, value: float, unit: str, note: str = "",
            goal: Goal | None = None) -> None:
        """Record and print a figure; its goal comes from :data:`GOALS` unless ``goal`` is given."""
        r = Result(scenario, metric, round(value, 3), unit, note)
        if goal is not None:
            r.goal, r.met = goal.text(unit), goal.met(value)
        self.results.append(r)
        shown = f"{r.goal} {goal_mark(r.met)}" if r.goal else ""
        print(f"  {scenario:<18} {metric:<40} {value:>12,.1f} {unit:<8} {shown:<20} {note}", flush=True)

    def conn(self, **kwargs) -> psycopg.Connection:
        """A connection to the scratch database (``application_name=`` names it in ``pg_stat_activity``)."""
        return connect(self.url, **kwargs)

    def tenants(self, n: int) -> list[uuid.UUID]:
        with self.conn() as c:
            return [auth.ensure_tenant(c, f"bench-{i}", f"Bench {i}")["id"] for i in range(n)]

    def reset(self) -> None:
        with self.conn() as c:
            c.execute("TRUNCATE jobs, job_attempts, job_stats, effects, workers CASCADE")

    def start_workers(self, n: int, queues: str, **env) -> list[subprocess.Popen]:
        procs = []
        for i in range(n):
            e = dict(os.environ)
            e.update({"DATABASE_URL": self.url, "OPSBOARD_ENV": "development", "OPSBOARD_LOG_FORMAT": "text",
                      "PYTHONPATH": str(ROOT)})
            e.update({k: str(v) for k, v in env.items()})
            # stderr into a file, not a pipe: nobody reads a pipe during the run, and a worker
            # blocks in logging once its 64 KiB fill (a long webhooks run stalled so).
            log = tempfile.TemporaryFile()
            p = subprocess.Popen([sys.executable, "-m", "worker", "--queues", queues, "--id", f"bench-{i}"],
                                 env=e, stdout=subprocess.DEVNULL, stderr=log)
            p.log = log  # read by _stderr when a worker fails to start
            procs.append(p)
        self.procs.extend(procs)
        # Wait until every worker registered itself (start-up is not measured).
        deadline = time.monotonic() + 30
        with self.conn() as c:
            while c.execute("SELECT count(*) AS n FROM workers").fetchone()["n"] < n:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("bench workers did not start: " + _stderr(procs))
                time.sleep(0.05)
        return procs

    def stop_workers(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            if getattr(p, "log", None) is not None:
                p.log.close()
        self.procs.clear()

    def wait_done(self, expected: int, timeout: float = 600) -> None:
        """Wait until no job is pending, retryable or running."""
        deadline = time.monotonic() + timeout
        with self.conn() as c:
            while True:
                # Through the partial indexes (waiting, running): a count over the
                # whole table, polled while the workers run, would load the server.
                left = c.execute("SELECT (SELECT count(*) FROM jobs WHERE status IN ('pending', 'retryable'))"
                                 " + (SELECT count(*) FROM jobs WHERE status = 'running') AS n").fetchone()["n"]
                if left == 0:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{left} of {expected} jobs still not done after {timeout}s")
                time.sleep(0.2)


def _stderr(procs) -> str:
    out = []
    for p in procs:
        log = getattr(p, "log", None) or p.stderr
        if p.poll() is not None and log:
            if log is not p.stderr:
                log.seek(0)
            out.append(log.read().decode(errors="replace")[-2000:])
    return "\n".join(out) or "(no output)"


def percentile(values: list[float], q: float) -> float:
    """The ``q`` percentile (0..100) by linear interpolation."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def web_login(app, email: str, password: str = "bench-password"):
    """A test client of the web ``app`` signed in as ``email`` (the scenarios time real views)."""
    client = app.test_client()
    client.get("/login")
    with client.session_transaction() as sess:
        token = sess.get("_csrf")
    r = client.post("/login", data={"email": email, "password": password, "csrf_token": token})
    if r.status_code != 302:
        raise RuntimeError(f"bench login of {email} failed: {r.status_code}")
    return client


def median_get_ms(client, path: str, runs: int = 5) -> float:
    """Median server time of ``runs`` GETs of ``path`` (ms); anything but 200 is an error."""
    times = []
    for _ in range(runs):
        t1 = time.perf_counter()
        r = client.get(path)
        times.append((time.perf_counter() - t1) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"{path} answered {r.status_code}")
    return statistics.median(times)


# ---------------------------------------------------------------- scenarios

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


def enqueue_cost(b: Bench) -> None:
    """Per job: WAL bytes and records, server and producer CPU of single enqueues (--jobs N, default 2,000)
    and enqueue_many (20 x 1,000); pgqueuer's beside them when installed."""
    from .bench_enqueue import enqueue_cost as run
    run(b)


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
        from .. import pauses
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
        from .. import db as dbmod
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
        from .. import metrics
        from ..auth import TenantScope
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


_FILL_SQL = """
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, status, attempts, max_attempts,
                  available_at, last_error_code, created_at, started_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text || 'x'), 1, 15))::uuid,
       (ARRAY['demo.send_email', 'demo.deliver_webhook', 'diag.noop', 'diag.sleep'])[1 + g %% 4], 1,
       (%(tenants)s::uuid[])[1 + g %% %(n_tenants)s], 'default', 100, jsonb_build_object('n', g),
       st::job_status, CASE WHEN st = 'pending' THEN 0 ELSE 1 END, 5, ts,
       CASE st WHEN 'dead' THEN (ARRAY['http_410', 'smtp_550', 'timeout'])[1 + g %% 3]
               WHEN 'retryable' THEN 'http_503' END,
       ts, CASE WHEN st <> 'pending' THEN ts END, CASE WHEN st IN ('succeeded', 'dead') THEN ts END
FROM (SELECT g, now() - make_interval(secs => (%(total)s - g) * 0.5) AS ts,
             CASE WHEN g %% 100 < 90 THEN 'succeeded' WHEN g %% 100 < 96 THEN 'pending'
                  WHEN g %% 100 < 98 THEN 'retryable' ELSE 'dead' END AS st
      FROM generate_series(1, %(total)s) g) s
"""


def dashboard(b: Bench) -> None:
    """1,000,000 jobs (90% succeeded, 6% pending, 2% retryable, 2% dead): server time of each page."""
    total = b.jobs or 1_000_000
    tenants = b.tenants(100)
    with b.conn() as c:
        t0 = time.perf_counter()
        c.execute(_FILL_SQL, {"total": total, "tenants": tenants, "n_tenants": len(tenants)})
        c.execute("INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, "
                  "detail) SELECT id, 1, 'bench', created_at, created_at, 'dead', last_error_code, "
                  "'receiver answered 410 Gone' FROM jobs WHERE status = 'dead'")
        c.execute("VACUUM ANALYZE jobs")
        c.execute("VACUUM ANALYZE job_attempts")
        fill = time.perf_counter() - t0
        from .. import metrics
        metrics.sample_depth(c)
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "bench@opsboard.local", "bench-password", "ops", "operator")
        dead_id = c.execute("SELECT id FROM jobs WHERE status = 'dead' ORDER BY id DESC LIMIT 1").fetchone()["id"]
    from ..web.app import create_app  # the dashboard scenario times the real web views
    from ..db import Database
    database = Database(b.url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": b.config.replace(database_url=b.url, mode="test",
                                                       secret_key="bench-" + "x" * 32),
                          "DATABASE": database})
        client = web_login(app, "bench@opsboard.local")
        pages = [("queue health", "/queues/_health"), ("tenants", "/tenants/_backlog"),
                 ("job list, newest", "/jobs/_rows"), ("job list, status=dead", "/jobs/_rows?status=dead"),
                 ("job list, one tenant", f"/jobs/_rows?tenant={tenants[7]}"),
                 ("job list, type + status", "/jobs/_rows?type=diag.noop&status=pending"),
                 ("job list, search", "/jobs/_rows?q=http_410"),
                 ("dead letters", "/dead/_groups"), ("job detail", f"/jobs/{dead_id}"),
                 ("audit", "/audit/_rows")]
        for label, path in pages:
            shown = path.split("?")[0].replace(str(dead_id), "<id>")
            b.add("dashboard", f"{label} ({shown})", median_get_ms(client, path), "ms",
                  f"median of 5 at {total:,} jobs")
    finally:
        database.close()
    print(f"  (filled {total:,} jobs in {fill:.0f} s)")
    b.reset()


#: Worker slots used by the processing scenarios (no-op handlers are cheap, so
#: more slots than cores keep the claim pipeline full).
BENCH_QUEUES = "critical=2,default=64,bulk=2"

def webhooks(b: Bench) -> None:
    """Signed webhooks to local receivers that verify them, 100 endpoints (10% down for 60 s): deliveries/s, CPU
    per delivery, attempts on a down one."""
    from .bench_webhooks import run
    run(b)


def relay(b: Bench) -> None:
    """Outbox relay: events -> jobs per second with one subscriber (default 20,000 events); commit->job p99."""
    from .bench_outbox import relay as run
    run(b)


def api(b: Bench) -> None:
    """POST /api/v1/events through gunicorn (-w 4 --threads 4), 8 clients for 10 s; then 4x the admitted rate."""
    from .bench_outbox import api as run
    run(b)


def api_worker(b: Bench) -> None:
    """POST /api/v1/events (wrk, an Idempotency-Key each) while a real worker relays, fans out and delivers
    to a sandbox; then 4x the admitted rate: each figure beside its goal (issue 27)."""
    from .bench_api import api_worker as run
    run(b)


def fanout(b: Bench) -> None:
    """One event to 10,000 recipients x 2 channels: inbox rows/s until every delivery job is queued."""
    from .bench_notifications import fanout as run
    run(b)


def sse(b: Bench) -> None:
    """1,000 SSE streams on one gunicorn gthread process: a new row reaching all (p99), memory per stream."""
    from .bench_notifications import sse as run
    run(b)


def broadcast(b: Bench) -> None:
    """One notification to 600,000 members x 2 channels (2 workers), OTP and another tenant meanwhile."""
    from .bench_broadcast import broadcast as run
    run(b)


def streams(b: Bench) -> None:
    """N inbox streams (--streams, default 2,000) on the stream server beside the demo's gunicorn: delivery
    p50/p99 to every stream, stream server RSS, /healthz and /login p99 meanwhile (issue 27)."""
    from .bench_streams import streams as run
    run(b)


def notify_scale(b: Bench) -> None:
    """Issue 27's notification tier in one run, each figure beside its goal: streams (--streams, default
    10,000), broadcast, api, webhooks."""
    wanted = b.streams
    b.streams = wanted or 10_000
    try:
        for run in (streams, broadcast, api, webhooks):
            run(b)
    finally:
        b.streams = wanted


def tickets(b: Bench) -> None:
    """Agents' ticket queue (every filter) and detail at 100,000 tickets x 10 messages (--jobs N tickets)."""
    from .bench_tickets import run
    run(b)


def scale(b: Bench) -> None:
    """10,000,000 jobs (--jobs N) built with COPY: claim, depth, every dashboard page, pruner, beside the goals."""
    from .bench_scale import run
    run(b)


#: The depth sampler before migration 0044: a recount of every waiting, running
#: and dead job (kept here only to time it beside the fold).
_RECOUNT_SQL = """
SELECT queue, type, tenant_id, status, count(*) AS jobs FROM (
    SELECT queue, type, tenant_id, status FROM jobs WHERE status IN ('pending', 'retryable', 'dead')
    UNION ALL SELECT queue, type, tenant_id, status FROM jobs WHERE status = 'running') j
GROUP BY queue, type, tenant_id, status
"""

#: Jobs for the depth and prune scenarios, by SQL (COPY-speed, no Python per row):
#: %(pending)s waiting jobs spread over the tenants, then %(finished)s succeeded
#: ones, created and finished %(age)s seconds ago, each with one attempt row
#: when %(attempts)s.
_BULK_SQL = """
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, status, attempts, max_attempts,
                  available_at, created_at, started_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text || 'x'), 1, 15))::uuid,
       (ARRAY['demo.send_email', 'demo.deliver_webhook', 'diag.noop', 'diag.sleep'])[1 + g %% 4], 1,
       (%(tenants)s::uuid[])[1 + (g / 4) %% %(n_tenants)s], 'default', 100, '{}'::jsonb,
       st::job_status, CASE WHEN st = 'pending' THEN 0 ELSE 1 END, 5, ts, ts,
       CASE WHEN st <> 'pending' THEN ts END, CASE WHEN st <> 'pending' THEN ts END
FROM (SELECT g, now() - make_interval(secs => %(age)s + (%(total)s - g) * 0.001) AS ts,
             CASE WHEN g <= %(pending)s THEN 'pending' ELSE 'succeeded' END AS st
      FROM generate_series(%(first)s, %(last)s) g) s
"""


def _bulk_tenants(b: Bench, n: int) -> list[uuid.UUID]:
    with b.conn() as c:
        c.execute("INSERT INTO tenants (id, slug, name) SELECT gen_random_uuid(), 'bulk-' || g, 'Bulk ' || g "
                  "FROM generate_series(1, %s) g ON CONFLICT (slug) DO NOTHING", (n,))
        return [r["id"] for r in c.execute("SELECT id FROM tenants WHERE slug LIKE 'bulk-%%' ORDER BY id")]


def _wal_of_xact(c, start_lsn, xid: int) -> int:
    """WAL bytes the transaction ``xid`` wrote since ``start_lsn`` (pg_walinspect: other sessions' WAL excluded)."""
    return int(c.execute("SELECT coalesce(sum(record_length), 0) AS b FROM pg_get_wal_records_info(%s, "
                         "pg_current_wal_flush_lsn()) WHERE xid = %s", (start_lsn, xid)).fetchone()["b"])


def depth(b: Bench) -> None:
    """Maintained depth at --jobs jobs (default 10,000,000; 20% pending) over 10,000 tenants: fold,
    reads and recount times; hot-path cost of the count triggers (on/off alternated)."""
    from .. import metrics
    from ..auth import TenantScope
    total = b.jobs or 10_000_000
    pending = total // 5
    tenants = _bulk_tenants(b, 10_000)
    t0 = time.perf_counter()
    with b.conn() as c:
        for first in range(1, total + 1, 1_000_000):
            c.execute(_BULK_SQL, {"first": first, "last": min(total, first + 999_999), "total": total,
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


def prune(b: Bench) -> None:
    """The pruner on --jobs finished jobs past retention (default 3,000,000, one attempt row each):
    rows/s, and the claim's time meanwhile; EXPLAIN (ANALYZE, BUFFERS, WAL) of one batch."""
    batch = 5000  # the pruner's default batch (worker.services.pruner.PrunerConfig)
    total = b.jobs or 3_000_000
    tenants = _bulk_tenants(b, 100)
    t0 = time.perf_counter()
    with b.conn() as c:
        for first in range(1, total + 1, 1_000_000):
            c.execute(_BULK_SQL, {"first": first, "last": min(total, first + 999_999), "total": total,
                                  "pending": 0, "age": 40 * 86400, "tenants": tenants, "n_tenants": len(tenants)})
        c.execute("INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome) "
                  "SELECT id, 1, 'bench', started_at, finished_at, 'succeeded' FROM jobs")
        # A live backlog beside them, for the claim timed during the prune.
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenants[k % 100]) for k in range(20_000)])
        c.execute("VACUUM ANALYZE jobs")
        c.execute("VACUUM ANALYZE job_attempts")
        fill = time.perf_counter() - t0
        from .. import db as dbmod
        from ..schema import uuid7_floor
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


SCENARIOS: dict[str, Callable[[Bench], None]] = {
    "enqueue_single": enqueue_single,
    "enqueue_many": enqueue_many,
    "enqueue_cost": enqueue_cost,
    "process_1": process_1,
    "process_2": process_2,
    "latency_idle": latency_idle,
    "process_slots": process_slots,
    "fairness": fairness,
    "otp_flood": otp_flood,
    "claim_cost": claim_cost,
    "dashboard": dashboard,
    "webhooks": webhooks,
    "relay": relay,
    "api": api,
    "api_worker": api_worker,
    "fanout": fanout,
    "sse": sse,
    "broadcast": broadcast,
    "streams": streams,
    "tickets": tickets,
    "notify_scale": notify_scale,
    "scale": scale,
    "depth": depth,
    "prune": prune,
}
#: Scenarios left out when no --scenario is given: ``notify_scale`` runs others (their parts run
#: anyway); ``scale``, ``depth`` and ``prune`` build databases of millions of jobs (``scale``: about
#: 20 minutes and 6 GB on its own).
GROUPS = {"notify_scale", "scale", "depth", "prune"}


def print_goals(results: list[Result]) -> None:
    """The figures that have a goal, again, together: what a run met and did not."""
    with_goal = [r for r in results if r.goal]
    if not with_goal:
        return
    print(f"\ngoals: {sum(r.met is True for r in with_goal)} of {len(with_goal)} met")
    for r in with_goal:
        print(f"  {goal_mark(r.met):<9} {r.scenario:<10} {r.metric:<44} {r.value:>12,.{2 if r.unit == '×' else 1}f} {r.unit:<7} goal {r.goal}")


def machine_info(url: str) -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    with connect(url) as c:
        info["postgres"] = c.execute("SHOW server_version").fetchone()["server_version"]
        info["fsync"] = c.execute("SHOW fsync").fetchone()["fsync"]
        info["synchronous_commit"] = c.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"]
    return info


#: Programs a scenario runs, checked before anything starts (a missing one: exit status 2, one line).
TOOLS = {"api_worker": (("wrk", "apt-get install wrk"),)}


def run_bench(config: Config, scenarios: list[str] | None = None, jobs: int | None = None,
              json_path: str | None = None, list_only: bool = False, database: str | None = None,
              streams: int | None = None) -> int:
    """Run ``scenarios`` in a scratch database dropped afterwards, or in ``database`` (a URL of an
    existing database, migrated and kept: the ``tickets`` scenario reuses a large seed there)."""
    if list_only:
        for name, fn in SCENARIOS.items():
            print(f"{name:<18} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    unknown = [s for s in scenarios or [] if s not in SCENARIOS]
    if unknown:
        from ..errors import UsageError
        raise UsageError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if streams is not None and streams < 1:
        from ..errors import UsageError
        raise UsageError("--streams must be at least 1")
    if jobs is not None and jobs < 1:
        from ..errors import UsageError
        raise UsageError("--jobs must be at least 1")
    for s in scenarios or []:
        for tool, install in TOOLS.get(s, ()):
            if shutil.which(tool) is None:
                from ..errors import UsageError
                raise UsageError(f"the {s} scenario needs {tool} ({install})")
    name = f"opsboard_bench_{os.getpid()}"
    server = url = database
    if not database:
        server = resolve_url(config)
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = make_conninfo(server, dbname=name)
    bench = Bench(url, config, jobs, streams=streams)
    try:
        migrate(url, log=lambda *_: None)
        machine = machine_info(url)
        print(f"opsboard bench on {machine.get('cpu', '?')} x{machine['cpus']}, PostgreSQL {machine['postgres']} "
              f"(fsync={machine['fsync']}, synchronous_commit={machine['synchronous_commit']})")
        print(f"  {'scenario':<18} {'metric':<40} {'value':>12} {'unit':<8} {'goal':<20} note")
        for s in scenarios or [s for s in SCENARIOS if s not in GROUPS]:
            SCENARIOS[s](bench)
        print_goals(bench.results)
    finally:
        bench.stop_workers()
        if not database:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine": machine, "results": [r.__dict__ for r in bench.results]}, f, indent=2)
        print(f"wrote {json_path}")
    return 0
