"""``opsboard bench``: measure the queue on this machine.

Not a test.  Each scenario runs in a scratch database (created on the
configured server, or the embedded one, and dropped afterwards), with the
full schema and real worker processes (``python -m worker``).  Timings of
processed jobs come from the database's own timestamps (``created_at``,
``started_at``, ``finished_at``), so the measurement does not include process
start-up or polling by the benchmark itself.

Prints a table; ``--json FILE`` writes
``{"machine": {...}, "results": [{"scenario", "metric", "value", "unit"}, ...]}``.
"""
from __future__ import annotations

import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
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


@dataclass
class Result:
    scenario: str
    metric: str
    value: float
    unit: str
    note: str = ""


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

    def add(self, scenario: str, metric: str, value: float, unit: str, note: str = "") -> None:
        self.results.append(Result(scenario, metric, round(value, 3), unit, note))
        print(f"  {scenario:<18} {metric:<40} {value:>12,.1f} {unit:<8} {note}", flush=True)

    def conn(self) -> psycopg.Connection:
        return connect(self.url)

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
            p = subprocess.Popen([sys.executable, "-m", "worker", "--queues", queues, "--id", f"bench-{i}"],
                                 env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
        if p.poll() is not None and p.stderr:
            out.append(p.stderr.read().decode(errors="replace")[-2000:])
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
                    "limit_group_limits": [], "queue_held": False, "held_tenants": [], "held_types": [],
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
        metrics.tenant_backlog(c, TenantScope(all=True))
        health = time.perf_counter() - t1
    b.add("claim_cost", f"claim of 64 at {total:,} pending, {n_tenants} tenants", statistics.median(times), "ms",
          f"EXPLAIN ANALYZE, median of 5 (filled at {total / fill:,.0f} jobs/s)")
    b.add("claim_cost", "depth sample at that backlog (leader, every 5 s+)", sample * 1000, "ms")
    b.add("claim_cost", "queue health + tenant backlog queries", health * 1000, "ms", "what the home page runs")
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
    """Signed webhooks to sandbox receivers, 100 endpoints (10% down for 60 s): deliveries/s, attempts on a down one."""
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


def tickets(b: Bench) -> None:
    """Agents' ticket queue (every filter) and detail at 100,000 tickets x 10 messages (--jobs N tickets)."""
    from .bench_tickets import run
    run(b)


SCENARIOS: dict[str, Callable[[Bench], None]] = {
    "enqueue_single": enqueue_single,
    "enqueue_many": enqueue_many,
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
    "fanout": fanout,
    "sse": sse,
    "broadcast": broadcast,
    "streams": streams,
    "tickets": tickets,
}


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
        print(f"  {'scenario':<18} {'metric':<40} {'value':>12} {'unit':<8} note")
        for s in scenarios or list(SCENARIOS):
            SCENARIOS[s](bench)
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
