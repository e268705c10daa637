"""Rolling upgrade (issue 29): the previous release's worker, taken from git history, runs against
the new schema beside the new worker; and the new worker runs against a database that the
previous release migrated, while the new migrations are applied under it.  Jobs flow the whole
time; none is lost, none runs twice.

The old code runs without a virtual environment of its own: its tree (``git archive``) comes
first on ``PYTHONPATH`` for this venv's interpreter (the dependencies did not change), so
``opsboard``, ``worker`` and ``tests.support.jobs`` (its ``OPSBOARD_JOB_MODULES``) are the old
release's; the test checks that before relying on it.  The procedure these tests back is in
docs/operations.md ("Upgrading without stopping").
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psycopg
import pytest

from opsboard import auth, jobqueue
from opsboard.config import ROOT
from opsboard.jobqueue import NewJob
from opsboard.migrate import discover, migrate
from tests.conftest import _admin, connect, wait_for, with_db, worker_env
from tests.support import releases

pytestmark = pytest.mark.chaos

EFFECTS = ("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
           "at timestamptz DEFAULT clock_timestamp())")
#: Job types both releases define (tests/support/jobs.py): only these are enqueued.
MODULES = "tests.support.jobs"
ENV = {"OPSBOARD_POLL_INTERVAL": "0.2", "OPSBOARD_JOB_MODULES": MODULES, "OPSBOARD_SHUTDOWN_GRACE_SECONDS": "20"}


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory) -> Path:
    """The previous release's tree, checked to be what an old process imports."""
    commit = releases.previous_release()
    tree = releases.extract(commit, tmp_path_factory.mktemp("previous-release"))
    probe = subprocess.run(
        [sys.executable, "-c", "import opsboard, worker, tests.support.jobs as j; "
                               "print(opsboard.__file__); print(worker.__file__); print(j.__file__)"],
        cwd=tree, env=_old_env("postgresql://unused"), capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    for path in probe.stdout.split():
        assert Path(path).resolve().is_relative_to(tree.resolve()), f"an old process imported {path}"
    return tree


def _old_env(db_url: str) -> dict:
    env = _env(db_url)
    env["PYTHONPATH"] = "."  # the old tree is the working folder: it comes before the editable install
    return env


def _env(db_url: str) -> dict:
    """Both releases' workers connect as the database's own user here: the fresh database has no
    application role, and the previous release sets no row-level-security scope (the roll across
    migration 0085 is the procedure of docs/operations.md, "Upgrading without stopping")."""
    env = worker_env(db_url, **ENV)
    env["DATABASE_URL"] = db_url
    return env


@pytest.fixture
def fresh_db(server_url, databases):
    """An empty database of the test's own (from template0: no migration applied)."""
    name = f"opsboard_up_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as c:
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    databases.created.append(name)
    yield with_db(server_url, name)
    with _admin(server_url) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def processes(tmp_path):
    procs: list[subprocess.Popen] = []

    def start(args: list[str], cwd: Path, env: dict, name: str) -> subprocess.Popen:
        log = tmp_path / f"{name}.log"
        p = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=open(log, "wb"),
                             stderr=subprocess.STDOUT)
        p.log_path = log
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def old_worker(processes, tree, db_url, wid):
    return processes(["-m", "worker", "--queues", "default=4", "--id", wid], tree, _old_env(db_url), wid)


def new_worker(processes, db_url, wid):
    return processes(["-m", "worker", "--queues", "default=4", "--id", wid], ROOT, _env(db_url), wid)


def n(c, sql, *args) -> int:
    return c.execute(sql, args).fetchone()["n"]


def registered(c, wid) -> bool:
    return n(c, "SELECT count(*) AS n FROM workers WHERE id = %s", wid) == 1


def enqueue(c, tenant, prefix: str, count: int, ms: int = 20) -> list:
    return jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"{prefix}-{i}", "ms": ms}, tenant)
                                     for i in range(count)])


def done_by(c, wid) -> int:
    return n(c, "SELECT count(*) AS n FROM test_effects WHERE worker = %s", wid)


def assert_each_job_ran_once(c, total: int) -> None:
    assert {r["status"]: r["n"] for r in c.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status")} == {
        "succeeded": total}
    assert n(c, "SELECT count(*) AS n FROM test_effects") == total
    assert n(c, "SELECT count(DISTINCT job_id) AS n FROM test_effects") == total
    assert n(c, "SELECT count(DISTINCT key) AS n FROM test_effects") == total
    assert n(c, "SELECT count(*) AS n FROM jobs WHERE attempts <> 1") == 0


def errors_in(proc) -> list[str]:
    """The lines logged at ERROR or above, and tracebacks (text log format: ``time LEVEL name: message``)."""
    return [line for line in proc.log_path.read_text(errors="replace").splitlines()
            if line.startswith("Traceback") or line.split(None, 2)[1:2] in (["ERROR"], ["CRITICAL"])]


def test_previous_release_worker_runs_beside_the_new_one_on_the_new_schema(old_tree, fresh_db, processes):
    migrate(fresh_db, log=lambda *_: None)  # the new schema: expand migrations applied before any code rolls
    with connect(fresh_db) as c:
        c.execute(EFFECTS)
        tenant = auth.ensure_tenant(c, "acme")["id"]
        old = old_worker(processes, old_tree, fresh_db, "old-1")
        wait_for(lambda: registered(c, "old-1"), message="the old worker to register")
        # Jobs enqueued by the new code, run by the old worker alone.
        total = len(enqueue(c, tenant, "a", 100))
        wait_for(lambda: done_by(c, "old-1") >= 50, timeout=60, message="the old worker to run jobs")
        # The roll: a new worker joins, then the old one is stopped while jobs flow (SIGTERM: it
        # finishes what it runs and gives back what it had claimed but not started).
        new = new_worker(processes, fresh_db, "new-1")
        wait_for(lambda: registered(c, "new-1"), message="the new worker to register")
        total += len(enqueue(c, tenant, "b", 100, ms=50))
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM test_effects WHERE key LIKE 'b-%%'") >= 20, timeout=60,
                 message="jobs to run on both")
        old.send_signal(signal.SIGTERM)
        assert old.wait(60) == 0
        total += len(enqueue(c, tenant, "c", 50))
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == total,
                 timeout=60, interval=0.2, message=f"{total} jobs to succeed")
        assert_each_job_ran_once(c, total)
        assert done_by(c, "old-1") >= 50 and done_by(c, "new-1") >= 50
        assert errors_in(old) == [], "the previous release's worker logged errors against the new schema"
        new.send_signal(signal.SIGTERM)
        assert new.wait(60) == 0
        assert errors_in(new) == []


#: The previous release's web tier, as far as the queue sees it: enqueues 5 jobs every 100 ms
#: until the file named by argv[2] exists, then prints how many jobs it enqueued.
_OLD_PRODUCER = textwrap.dedent("""
    import os, sys, time
    import psycopg
    from psycopg.rows import dict_row
    from opsboard import auth, jobqueue
    from opsboard.catalogue import activate
    from opsboard.db import SESSION_OPTIONS
    from opsboard.features import build_catalogue
    activate(build_catalogue(modules=("tests.support.jobs",)))
    total = 0
    with psycopg.connect(sys.argv[1], autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        while True:
            stop = os.path.exists(sys.argv[2])
            ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.record", {"key": f"old-{total + i}", "ms": 20}, t)
                                            for i in range(5)])
            total += len(ids)
            if stop:
                break
            time.sleep(0.1)
    print(total)
""")


def test_new_worker_joins_while_the_new_migrations_are_applied(old_tree, fresh_db, processes, tmp_path):
    previous = releases.previous_release()
    pending = [m.version for m in discover() if m.version not in releases.migration_versions(previous)]
    # The previous release migrates the empty database to its own head.
    env = _old_env(fresh_db)
    done = subprocess.run([sys.executable, "-c", "import sys; from opsboard.cli import main; "
                                                 "sys.exit(main(['migrate']))"],
                          cwd=old_tree, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with connect(fresh_db) as c:
        assert n(c, "SELECT max(version) AS n FROM schema_migrations") == max(releases.migration_versions(previous))
        c.execute(EFFECTS)
        # The old fleet runs: its producer enqueues, its worker works.
        stop_file = tmp_path / "stop-producer"
        producer = subprocess.Popen([sys.executable, "-c", _OLD_PRODUCER, fresh_db, str(stop_file)], cwd=old_tree,
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            old = old_worker(processes, old_tree, fresh_db, "old-1")
            wait_for(lambda: done_by(c, "old-1") >= 20, timeout=60, message="the old worker to run jobs")
            # A new worker starts before the expand migrations (a deploy that runs them as it rolls):
            # it says what it lacks and waits, holding nothing, until they land under the running fleet.
            new = new_worker(processes, fresh_db, "new-1")
            if pending:
                wait_for(lambda: "migration(s) this release needs" in new.log_path.read_text(errors="replace"),
                         message="the new worker to say it waits for the migrations")
                assert not registered(c, "new-1")
            applied = migrate(fresh_db, log=lambda *_: None)  # under the running fleet
            assert [m.version for m in applied] == pending
            wait_for(lambda: registered(c, "new-1"), message="the new worker to register")
            wait_for(lambda: done_by(c, "new-1") >= 20, timeout=60, message="the new worker to run jobs")
        finally:
            stop_file.touch()
            out, err = producer.communicate(timeout=60)
        assert producer.returncode == 0, err
        total = int(out.strip())
        assert total > 0
        old.send_signal(signal.SIGTERM)
        assert old.wait(60) == 0
        tenant = auth.ensure_tenant(c, "acme")["id"]
        total += len(enqueue(c, tenant, "after", 50))  # the new code enqueues; only the new worker is left
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == total,
                 timeout=60, interval=0.2, message=f"{total} jobs to succeed")
        assert_each_job_ran_once(c, total)
        assert n(c, "SELECT count(*) AS n FROM schema_migrations WHERE version = ANY(%s)", pending) == len(pending)
        assert errors_in(old) == [], "the previous release's worker logged errors while the migrations ran"
        new.send_signal(signal.SIGTERM)
        assert new.wait(60) == 0
