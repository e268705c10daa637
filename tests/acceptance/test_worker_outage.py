"""A database outage on a PostgreSQL server of the test's own (issue 16 §2).

The worker resumes claiming within 2 s of the server's return, logs one line
when the database goes away and one when it is back; /readyz answers 503
during the outage and 200 after; a worker started during the outage waits
(or exits at once with --exit-without-database); SIGTERM during an outage
exits within the grace.  The outage lasts OPSBOARD_OUTAGE_SECONDS (20).
"""
import os
import signal
import time

import psycopg
import pytest

from opsboard import auth, jobqueue
from opsboard.db import Database
from opsboard.migrate import migrate
from opsboard.jobqueue import NewJob
from tests.conftest import connect, make_config, wait_for
from tests.support import pgcluster

pytestmark = pytest.mark.chaos

OUTAGE = float(os.environ.get("OPSBOARD_OUTAGE_SECONDS", "20"))
GRACE = 5
ENV = {"OPSBOARD_POLL_INTERVAL": "0.5", "OPSBOARD_SHUTDOWN_GRACE_SECONDS": str(GRACE), "OPSBOARD_LEASE_SECONDS": "30"}
EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"


@pytest.fixture
def cluster():
    if not pgcluster.available():
        pytest.fail("PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin): install postgresql")
    c = pgcluster.Cluster()
    c.start()
    yield c
    c.destroy()


def log_lines(proc, needle: str) -> int:
    return sum(needle in line for line in proc.log_path.read_text(errors="replace").splitlines())


def test_outage_recovery_readiness_and_shutdown(cluster, start_worker):
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE opsboard")
    url = cluster.url.rsplit("/", 1)[0] + "/opsboard"
    migrate(url, log=lambda *_: None)
    with connect(url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
    a = start_worker(url, "--queues", "default=2", "--id", "w-a", **ENV)
    with connect(url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM workers").fetchone()["n"] == 1, message="w-a to start")
    from opsboard.web.app import create_app
    database = Database(url, min_size=1, max_size=2).open()
    client = create_app({"OPSBOARD": make_config(database_url=url), "DATABASE": database, "TESTING": True}).test_client()
    try:
        assert client.get("/readyz").status_code == 200

        cluster.stop("fast")
        down = time.monotonic()
        b = start_worker(url, "--queues", "default=2", "--id", "w-b", **ENV)             # waits for the database
        c_ = start_worker(url, "--queues", "default=2", "--id", "w-c", "--exit-without-database", **ENV)
        assert c_.wait(20) == 2
        assert client.get("/readyz").status_code == 503
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down)))  # the outage itself
        assert b.poll() is None and a.poll() is None

        cluster.start()
        back = time.monotonic()
        with connect(url) as c:
            job = jobqueue.enqueue(c, "test.record", {"key": "after"}, tenant=t)
            wait_for(lambda: jobqueue.get_job(c, job["id"])["status"] == "succeeded", timeout=15,
                     message="a job to run after the outage")
            j = jobqueue.get_job(c, job["id"])
            assert (j["started_at"] - j["created_at"]).total_seconds() < 2.0, (j["started_at"], j["created_at"])
            assert time.monotonic() - back < 4.0
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM workers WHERE id = 'w-b'").fetchone()["n"],
                     timeout=10, message="the worker started during the outage to register")
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=3, message="/readyz 200 again")
        wait_for(lambda: log_lines(a, "database is back after"), timeout=5, message="the back-again line")
        assert log_lines(a, "database unavailable") == 1
        assert log_lines(a, "database is back after") == 1
        assert log_lines(a, "Traceback") == 0 and log_lines(a, "error connecting") == 0

        # SIGTERM during an outage: exit within the grace; a job that cannot be
        # released stays for the reaper, and the worker says so.
        with connect(url) as c:
            held = jobqueue.enqueue(c, "test.slow", {"key": "held", "ms": 600000}, tenant=t)
            holder = wait_for(lambda: jobqueue.get_job(c, held["id"])["locked_by"], timeout=10,
                              message="the slow job to start")
        proc = {"w-a": a, "w-b": b}[holder]
        cluster.stop("fast")
        time.sleep(1.0)
        signalled = time.monotonic()
        for p in (a, b):
            p.send_signal(signal.SIGTERM)
        proc.wait(GRACE + 5)
        took = time.monotonic() - signalled
        assert took <= GRACE + 0.5, took
        assert log_lines(proc, "stay running until the lease reaper") == 1
        other = b if proc is a else a
        assert log_lines(other, "stay running until the lease reaper") == 0
        for p in (a, b):
            p.wait(GRACE + 5)
        cluster.start()
        with connect(url) as c:
            assert jobqueue.get_job(c, held["id"])["status"] == "running"  # the reaper's, on its lease
    finally:
        database.close()
