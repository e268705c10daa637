"""``opsboard bench``: measure the queue on this machine.  The harness every scenario shares.

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

Here: the scratch database and the worker processes (:class:`Bench`), timing helpers, the table
printer, the JSON writer and the scenario registry (:class:`Registry`, :func:`run_bench`).  The
scenarios live in modules of their own and import this one; this module imports none of them:
:mod:`opsboard_bench.scenarios` lists them.
"""
from __future__ import annotations

import json
import operator
import os
import platform
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
from psycopg.conninfo import make_conninfo

from opsboard import auth
from opsboard.config import ROOT, Config
from opsboard.db import connect, resolve_url
from opsboard.errors import UsageError
from opsboard.migrate import ensure_roles, migrate

#: The roles of the bench's scratch database (opsboard migrate --print-roles-sql): its web and workers
#: run as the application role, as production does.
BENCH_OWNER, BENCH_APP = "opsboard_bench_owner", "opsboard_bench_app"


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
#: metric is still named somewhere in opsboard_bench).  Issue 27: the notification tier; issue 24: the queue
#: beside its peers (``opsboard bench --peers``, ratios: :func:`opsboard_bench.peers.peer_goals`).
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
    # issue 47: CPU per job near the bare loop's, enqueue near commit speed (same --peers run)
    ("peers", "CPU per job, 1 worker / bare loop's"): Goal("<=", 1.3, "×"),
    ("peers", "CPU per job, 2 workers / own 1 worker"): Goal("<=", 1.1, "×"),
    ("peers", "single enqueue / bare loop's"): Goal(">=", 0.9, "×"),
    ("peers", "batch enqueue / bare loop's"): Goal(">=", 0.5, "×"),
    ("peers", "idle p99 / pgqueuer's"): Goal("<=", 1.0, "×"),
    ("peers", "2 workers / pgqueuer's 2 workers"): Goal(">", 1.0, "×"),
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
    #: ``url`` as the application role (neither superuser nor BYPASSRLS): what the bench's web and
    #: workers connect as, so that row-level security costs what it costs in production.
    app_url: str = ""
    #: Open streams of the ``streams`` scenario (``--streams``).
    streams: int | None = None
    #: How long the ``pinned_horizon`` scenario holds the horizon (``--pin-seconds``; None: its default).
    pin_seconds: int | None = None
    results: list[Result] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    #: A scenario whose issue fixes the shape of ``--json FILE`` sets it here (the ``workflows`` scenario):
    #: the file is then exactly this document.
    document: dict | None = None

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
            e.update({"DATABASE_URL": self.app_url or self.url, "OPSBOARD_ENV": "development", "OPSBOARD_LOG_FORMAT": "text",
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


@dataclass(frozen=True)
class Registry:
    """The scenarios ``opsboard bench`` knows, in the order it runs them (filled by
    :mod:`opsboard_bench.scenarios`, never by importing a scenario module)."""

    #: Scenario name -> the function that runs it (its docstring's first line is its ``--list`` entry).
    scenarios: dict[str, Callable[[Bench], None]]
    #: Scenarios left out when no ``--scenario`` is given.
    groups: frozenset[str] = frozenset()
    #: Programs a scenario runs, checked before anything starts (a missing one: exit status 2, one line):
    #: scenario -> ((program, how to install it), ...).
    tools: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


def run_bench(config: Config, registry: Registry, scenarios: list[str] | None = None, jobs: int | None = None,
              json_path: str | None = None, list_only: bool = False, database: str | None = None,
              streams: int | None = None, pin_seconds: int | None = None) -> int:
    """Run ``scenarios`` of ``registry`` in a scratch database dropped afterwards, or in ``database`` (a URL
    of an existing database, migrated and kept: the ``tickets`` scenario reuses a large seed there)."""
    known = registry.scenarios
    if list_only:
        for name, fn in known.items():
            print(f"{name:<18} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        return 0
    unknown = [s for s in scenarios or [] if s not in known]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(known)}")
    if streams is not None and streams < 1:
        raise UsageError("--streams must be at least 1")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if pin_seconds is not None and pin_seconds < 1:
        raise UsageError("--pin-seconds must be at least 1")
    for s in scenarios or []:
        for tool, install in registry.tools.get(s, ()):
            if shutil.which(tool) is None:
                raise UsageError(f"the {s} scenario needs {tool} ({install})")
    name = f"opsboard_bench_{os.getpid()}"
    server = url = database
    if not database:
        server = resolve_url(config)
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = make_conninfo(server, dbname=name)
    bench = Bench(url, config, jobs, streams=streams, pin_seconds=pin_seconds)
    try:
        migrate(url, log=lambda *_: None)
        bench.app_url = ensure_roles(url, BENCH_OWNER, BENCH_APP)
        machine = machine_info(url)
        print(f"opsboard bench on {machine.get('cpu', '?')} x{machine['cpus']}, PostgreSQL {machine['postgres']} "
              f"(fsync={machine['fsync']}, synchronous_commit={machine['synchronous_commit']})")
        print(f"  {'scenario':<18} {'metric':<40} {'value':>12} {'unit':<8} {'goal':<20} note")
        for s in scenarios or [s for s in known if s not in registry.groups]:
            known[s](bench)
        print_goals(bench.results)
    finally:
        bench.stop_workers()
        if not database:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if json_path:
        with open(json_path, "w") as f:
            json.dump(bench.document if bench.document is not None
                      else {"machine": machine, "results": [r.__dict__ for r in bench.results]}, f, indent=2)
        print(f"wrote {json_path}")
    return 0
