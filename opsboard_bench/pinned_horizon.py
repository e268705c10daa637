"""The ``pinned_horizon`` scenario (issue 48): the queue while something holds PostgreSQL's MVCC horizon.

Vacuum cannot remove a row version that an open snapshot may still see, so a long transaction anywhere
in the database makes every dead version of the hot tables stay: index scans walk them, pages fill,
the claim slows.  This scenario measures that on a throwaway cluster of its own, because what it
measures depends on autovacuum, and the shared server of this project runs with ``autovacuum = off``.

The cluster: ``initdb`` from ``/usr/lib/postgresql/<newest>/bin`` into a temporary folder (as the
unprivileged user ``pgtest`` when run as root: ``initdb`` refuses root), a free port on 127.0.0.1, and
:data:`SERVER_SETTINGS`: autovacuum on, with the settings a production queue server commonly runs
(naptime 10 s, scale factors 0.05, cost limit 1000), and ``fsync`` and ``synchronous_commit`` as the
configured server has them, so that the figures compare with the other scenarios'.  It is stopped
and removed at the end.

Two worker processes (``--queues critical=2,default=16,bulk=2``: 32 default slots, as the outside
harness's 32 workers) run ``diag.sleep`` jobs of 1 ms, ten tenants round robin.

1. **Peak**: ``--jobs N`` (default 20,000) jobs enqueued up front and drained: the clean peak.
2. **Clean** (60 s): a producer thread enqueues at 60 % of that peak (batches every 50 ms).
3. **Pinned** (``--pin-seconds``, default 600 as the issue asks): the producer goes on; one session
   holds a REPEATABLE READ snapshot and an xid, idle; four REPEATABLE READ sessions each scan
   ``jobs`` and ``job_attempts`` (``count(*)``) once a second, in one transaction each for the whole
   phase.
4. **Recovery** (60 s): the pin and readers end (rollback); the producer goes on.
5. The producer stops and the workers drain what is left (up to 5 minutes).

Figures, all from the database's own timestamps (``created_at`` is the enqueueing transaction's
start, ``started_at`` the claim's statement start, ``finished_at`` the outcome's):

- ``*_jobs_per_s``: jobs finished inside the phase over its length (the clean phase without its
  first 5 s);
- ``*_claim_p99_ms``: enqueue -> claim (``started_at - created_at``) of the jobs enqueued in the
  phase, p99: what a producer sees, backlog included;
- ``recovery_s``: seconds from the release until the backlog (jobs enqueued and not yet claimed,
  every 0.5 s, from the same timestamps) is back at or below the clean phase's largest and every
  later second's enqueue -> claim p99 is within 3x the clean p99, for the rest of the phase
  (the recovery phase's length when it never is);
- ``lost``: jobs enqueued by the producer minus jobs succeeded after the drain (0: none lost);
- ``hot_dead_pct_end``: dead tuples of the hot tables (``jobs`` and the depth counters:
  ``job_count_deltas``, ``queue_depth``, ``queue_depth_totals``, ``tenant_depth``) over their
  live plus dead, from ``pg_stat_user_tables`` just before the release; ``hot_dead_pct_mid`` at
  the pin's half, to tell whether it grows with the pin, ``hot_dead_pct_clean`` at the clean
  phase's end (steady state, autovacuum free to work), and each table's share beside them.

``--json FILE`` writes the issue's keys, then the run's settings and the extra figures.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from bisect import bisect_right
from pathlib import Path

import psycopg

from opsboard import jobqueue
from opsboard.db import connect
from opsboard.migrate import migrate

from .harness import Bench, Goal, percentile

QUEUES = "critical=2,default=16,bulk=2"
WORKERS = 2
CLEAN_SECONDS = 60
RECOVERY_SECONDS = 60
LOAD_SHARE = 0.6
HOT_TABLES = ("jobs", "job_count_deltas", "queue_depth", "queue_depth_totals", "tenant_depth")
READ_TABLES = ("jobs", "job_attempts")

#: The throwaway server's settings beside initdb's defaults (fsync and synchronous_commit are copied
#: from the configured server at run time).
SERVER_SETTINGS = {
    "autovacuum": "on",
    "autovacuum_naptime": "10s",
    "autovacuum_vacuum_scale_factor": "0.05",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.05",
    "autovacuum_vacuum_cost_limit": "1000",
    "shared_buffers": "256MB",
    "max_connections": "100",
    "log_autovacuum_min_duration": "0",
}
USER = "pgtest"


class _Cluster:
    """A PostgreSQL server of this run's own (the same recipe as the tests' ``tests/support/pgcluster``,
    which the benchmarks do not import)."""

    def __init__(self, settings: dict[str, str]):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
        if not found:
            raise RuntimeError("the pinned_horizon scenario needs PostgreSQL's server binaries "
                               "(/usr/lib/postgresql/*/bin: apt-get install postgresql)")
        self.bin = Path(found[-1]).parent
        self.root = Path(tempfile.mkdtemp(prefix="opsboard-pinned-"))
        self.data = self.root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                pwd.getpwnam(USER)
            except KeyError:
                subprocess.run(["useradd", "-m", USER], check=True)
            shutil.chown(self.root, USER, USER)
        os.chmod(self.root, 0o755)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        lines = {"listen_addresses": "'127.0.0.1'", "port": str(self.port),
                 "unix_socket_directories": f"'{self.root}'", **settings}
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n" + "".join(f"{k} = {v}\n" for k, v in lines.items()))
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", USER, "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()[-500:]}")

    def destroy(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


class _Producer(threading.Thread):
    """Enqueues ``rate`` jobs a second in batches every 50 ms, catching up when a batch was late."""

    def __init__(self, url: str, tenants: list, rate: float):
        super().__init__(daemon=True)
        self.url, self.tenants, self.rate = url, tenants, rate
        self.produced = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.url) as c:
                start = time.monotonic()
                while not self.stop.is_set():
                    due = int(self.rate * (time.monotonic() - start)) - self.produced
                    if due > 0:
                        due = min(due, 2000)
                        with c.transaction():
                            jobqueue.enqueue_many(c, [
                                jobqueue.NewJob("diag.sleep", {"ms": 1}, self.tenants[(self.produced + i) % len(self.tenants)])
                                for i in range(due)])
                        self.produced += due
                    self.stop.wait(0.05)
        except BaseException as exc:  # reported by the scenario
            self.error = exc


class _Pin:
    """An idle transaction holding a snapshot and an xid, and four REPEATABLE READ readers scanning the
    queue's tables once a second, each in one transaction, until :meth:`release`."""

    def __init__(self, url: str, readers: int = 4):
        self.stop = threading.Event()
        self.idle = connect(url)
        self.idle.autocommit = False
        self.idle.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.idle.execute("SELECT txid_current(), count(*) FROM jobs")
        self.scans = 0
        self.threads = [threading.Thread(target=self._read, args=(url,), daemon=True) for _ in range(readers)]
        for t in self.threads:
            t.start()

    def _read(self, url: str) -> None:
        with connect(url) as c:
            c.autocommit = False
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            while not self.stop.is_set():
                for table in READ_TABLES:
                    c.execute(f"SELECT count(*) FROM {table}").fetchone()
                self.scans += 1
                self.stop.wait(1.0)
            c.rollback()

    def release(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        self.idle.rollback()
        self.idle.close()


def _db_now(c) -> float:
    return float(c.execute("SELECT extract(epoch FROM clock_timestamp()) AS t").fetchone()["t"])


def _dead(c) -> tuple[float, dict[str, float]]:
    rows = c.execute("SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                     (list(HOT_TABLES),)).fetchall()
    live = sum(r["n_live_tup"] for r in rows)
    dead = sum(r["n_dead_tup"] for r in rows)
    by = {r["relname"]: round(100.0 * r["n_dead_tup"] / max(1, r["n_live_tup"] + r["n_dead_tup"]), 1) for r in rows}
    return 100.0 * dead / max(1, live + dead), by


def _peak(b: Bench, tenants: list) -> float:
    n = b.jobs or 20_000
    with b.conn() as c:
        for i in range(0, n, 5000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.sleep", {"ms": 1}, tenants[j % len(tenants)])
                                          for j in range(i, min(n, i + 5000))])
        c.execute("VACUUM ANALYZE jobs")
    b.start_workers(WORKERS, QUEUES)
    b.wait_done(n)
    b.stop_workers()
    with b.conn() as c:
        row = c.execute("SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs "
                        "FROM jobs WHERE status = 'succeeded'").fetchone()
    b.reset()
    with b.conn() as c:
        c.execute("VACUUM ANALYZE jobs")
    return row["n"] / float(row["secs"])


def run(b: Bench) -> None:
    pin_seconds = b.pin_seconds if b.pin_seconds is not None else 600
    with b.conn() as c:
        copied = {k: c.execute(f"SHOW {k}").fetchone()[k] for k in ("fsync", "synchronous_commit")}
    settings = {**SERVER_SETTINGS, **copied}
    cluster = _Cluster(settings)
    inner = None
    try:
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE bench")
        url = cluster.url("bench")
        migrate(url, log=lambda *_: None)
        inner = Bench(url, b.config, b.jobs)
        tenants = inner.tenants(10)
        peak = _peak(inner, tenants)
        rate = LOAD_SHARE * peak
        print(f"  pinned_horizon: clean peak {peak:,.0f} jobs/s, offering {rate:,.0f} jobs/s; "
              f"pin {pin_seconds} s", flush=True)

        inner.start_workers(WORKERS, QUEUES)
        producer = _Producer(url, tenants, rate)
        with inner.conn() as c:
            t_clean = _db_now(c)
            producer.start()
            time.sleep(CLEAN_SECONDS)
            dead_clean, dead_clean_by = _dead(c)
            t_pin = _db_now(c)
            pin = _Pin(url)
            time.sleep(pin_seconds / 2)
            dead_mid, _ = _dead(c)
            time.sleep(pin_seconds - pin_seconds / 2)
            dead_end, dead_by = _dead(c)
            t_release = _db_now(c)
            pin.release()
            time.sleep(RECOVERY_SECONDS)
            t_end = _db_now(c)
            producer.stop.set()
            producer.join(30)
        if producer.error is not None:
            raise RuntimeError(f"the producer failed: {producer.error!r}")
        try:
            inner.wait_done(producer.produced, timeout=300)
        except RuntimeError as exc:
            print(f"  pinned_horizon: {exc}", flush=True)
        inner.stop_workers()

        with inner.conn() as c:
            rows = c.execute("SELECT extract(epoch FROM created_at)::float8 AS c, extract(epoch FROM started_at)::float8 AS s, "
                             "extract(epoch FROM finished_at)::float8 AS f, status::text AS st FROM jobs").fetchall()
            succeeded = sum(1 for r in rows if r["st"] == "succeeded")
        lost = producer.produced - succeeded

        def done_rate(t0: float, t1: float) -> float:
            return sum(1 for r in rows if r["f"] is not None and t0 <= r["f"] < t1) / (t1 - t0)

        def lat(t0: float, t1: float) -> list[float]:
            # a job never claimed counts as claimed at the drain's end (it is then in "lost" too)
            return [((r["s"] if r["s"] is not None else t_end + 300) - r["c"]) * 1000 for r in rows if t0 <= r["c"] < t1]

        clean_rate = done_rate(t_clean + 5, t_pin)
        pinned_rate = done_rate(t_pin, t_release)
        clean_p99 = percentile(lat(t_clean + 5, t_pin), 99)
        pinned_p99 = percentile(lat(t_pin, t_release), 99)

        created = sorted(r["c"] for r in rows)
        started = sorted(r["s"] for r in rows if r["s"] is not None)

        def backlog(t: float) -> int:
            return bisect_right(created, t) - bisect_right(started, t)

        clean_backlog = max(backlog(t_clean + 5 + 0.5 * i) for i in range(int((t_pin - t_clean - 5) * 2)))
        steps = int((t_end - t_release) * 2)
        ok = []
        for i in range(steps):
            t = t_release + 0.5 * i
            second = lat(t, t + 1.0)
            ok.append(backlog(t) <= clean_backlog and (not second or percentile(second, 99) <= 3 * clean_p99))
        recovery = float(RECOVERY_SECONDS)
        for i in range(steps):
            if all(ok[i:]):
                recovery = 0.5 * i
                break
        backlog_pin_max = max(backlog(t_pin + 0.5 * i) for i in range(int((t_release - t_pin) * 2)))
    finally:
        if inner is not None:
            inner.stop_workers()
        cluster.destroy()

    s = "pinned_horizon"
    b.add(s, "clean peak (drain, 2 workers)", peak, "jobs/s", f"{b.jobs or 20_000} jobs of 1 ms")
    b.add(s, "offered (60 % of the peak)", rate, "jobs/s")
    b.add(s, "clean throughput", clean_rate, "jobs/s")
    b.add(s, "pinned throughput", pinned_rate, "jobs/s", f"pin {pin_seconds} s",
          goal=Goal(">=", round(0.9 * clean_rate, 1)))
    b.add(s, "clean enqueue->claim p99", clean_p99, "ms")
    b.add(s, "pinned enqueue->claim p99", pinned_p99, "ms", goal=Goal("<=", round(3 * clean_p99, 1)))
    b.add(s, "recovery after the release", recovery, "s", goal=Goal("<=", 10))
    b.add(s, "lost", lost, "jobs", f"{producer.produced} enqueued", goal=Goal("==", 0))
    b.add(s, "hot tables dead share, clean phase's end", dead_clean, "%",
          " ".join(f"{k}={v}" for k, v in sorted(dead_clean_by.items())))
    b.add(s, "hot tables dead share, pin's half", dead_mid, "%")
    b.add(s, "hot tables dead share, pin's end", dead_end, "%", " ".join(f"{k}={v}" for k, v in sorted(dead_by.items())))
    b.add(s, "largest backlog while pinned", backlog_pin_max, "jobs", f"clean: {clean_backlog}")
    b.document = {
        "clean_jobs_per_s": round(clean_rate, 1), "pinned_jobs_per_s": round(pinned_rate, 1),
        "clean_claim_p99_ms": round(clean_p99, 1), "pinned_claim_p99_ms": round(pinned_p99, 1),
        "recovery_s": recovery, "lost": lost, "hot_dead_pct_end": round(dead_end, 1),
        "hot_dead_pct_mid": round(dead_mid, 1), "dead_pct_end_by_table": dead_by,
        "hot_dead_pct_clean": round(dead_clean, 1), "dead_pct_clean_by_table": dead_clean_by,
        "peak_jobs_per_s": round(peak, 1), "offered_jobs_per_s": round(rate, 1),
        "enqueued": producer.produced, "pin_seconds": pin_seconds, "clean_seconds": CLEAN_SECONDS,
        "recovery_seconds": RECOVERY_SECONDS, "backlog_clean_max": clean_backlog,
        "backlog_pinned_max": backlog_pin_max, "reader_scans": pin.scans,
        "server": {"postgres_bin": str(cluster.bin), **settings},
        "workers": WORKERS, "queues": QUEUES,
    }
