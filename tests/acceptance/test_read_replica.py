"""Reads on a streaming replica (issue 29): OPSBOARD_READ_DATABASE_URL.

A primary and a real streaming replica (``pg_basebackup -R``) of the test's
own.  The dashboard's heavy reads and /metrics come from the replica while it
is within the lag bound; a session's reads after its own write come from the
primary until the replica has replayed that write; a lagging or stopped
replica sends reads to the primary; the queue health page says which.
Replay is paused with ``pg_wal_replay_pause()`` to make the replica's copy
visibly older than the primary's.
"""
from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from opsboard import auth, jobqueue, metrics
from opsboard.db import Database
from opsboard.migrate import migrate
from tests.conftest import CATALOGUE, _session_csrf, connect, csrf_from, make_config, wait_for
from tests.support import pgcluster

pytestmark = pytest.mark.chaos
TOKEN = "replica-metrics-token"
PASSWORD = "correct horse battery"


@pytest.fixture
def clusters():
    if not pgcluster.available():
        pytest.fail("PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin): install postgresql")
    primary = pgcluster.Cluster()
    primary.start()
    made = [primary]
    try:
        with psycopg.connect(primary.url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE opsboard")
        url = primary.url.rsplit("/", 1)[0] + "/opsboard"
        migrate(url, log=lambda *_: None)
        replica = pgcluster.Cluster(replica_of=primary)
        made.append(replica)
        replica.start()
        yield url, replica.url.rsplit("/", 1)[0] + "/opsboard", replica
    finally:
        for c in made:
            c.destroy()


def _app(url, read_url, max_lag):
    from opsboard.web.app import create_app
    database = Database(url, min_size=1, max_size=4).open()
    app = create_app({"OPSBOARD": make_config(database_url=url, read_database_url=read_url, read_max_lag=max_lag,
                                              metrics_token=TOKEN),
                      "DATABASE": database, "TESTING": True, "CATALOGUE": CATALOGUE})
    return app, database


def _login(app, url, email):
    client = app.test_client()
    with connect(url) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, email, PASSWORD, "ops", "operator")
    r = client.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": csrf_from(client)})
    assert r.status_code == 302, r.get_data(as_text=True)
    client.csrf = _session_csrf(client)
    return client


def pending(client) -> int:
    """Pending test.record jobs according to /metrics (the sampled depth)."""
    r = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.status_code
    total = 0.0
    for line in r.get_data(as_text=True).splitlines():
        if line.startswith("opsboard_jobs{") and 'type="test.record"' in line and 'status="pending"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def replica_state(client) -> str:
    html = client.get("/queues/_health").get_data(as_text=True)
    m = re.search(r'id="read-replica"[^>]*data-state="([a-z_]+)"', html)
    assert m, html[:2000]
    return m.group(1)


def caught_up(primary_url, replica_url) -> bool:
    with connect(primary_url) as p, connect(replica_url) as r:
        lsn = p.execute("SELECT pg_current_wal_lsn()::text AS l").fetchone()["l"]
        return r.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn AS ok", (lsn,)).fetchone()["ok"]


def enqueue(url, tenant, keys):
    with connect(url) as c:
        ids = [jobqueue.enqueue(c, "test.record", {"key": k}, tenant=tenant)["id"] for k in keys]
        metrics.sample_depth(c)
    return ids


def test_reads_follow_the_replica_within_its_bound_and_fall_back(clusters):
    url, read_url, replica = clusters
    with connect(url) as c:
        tenant = auth.ensure_tenant(c, "acme")["id"]
    first = enqueue(url, tenant, ["a", "b", "c"])
    app, database = _app(url, read_url, max_lag=60)
    strict, strict_db = _app(url, read_url, max_lag=0.5)
    try:
        actor = _login(app, url, "actor@example.test")       # will act, then read its own write
        viewer = _login(app, url, "viewer@example.test")     # only reads
        strict_viewer = _login(strict, url, "strict@example.test")
        wait_for(lambda: caught_up(url, read_url), message="the replica to replay the setup")
        wait_for(lambda: replica_state(viewer) == "up", timeout=10, message="the replica to be used")
        assert pending(app.test_client()) == 3

        # The replica stops replaying: its copy is now older than the primary's.
        with connect(read_url) as r:
            r.execute("SELECT pg_wal_replay_pause()")
        later = enqueue(url, tenant, ["d", "e"])
        assert pending(app.test_client()) == 3, "within the bound, /metrics reads the replica"
        viewer_jobs = viewer.get("/jobs/?status=pending").get_data(as_text=True)
        assert str(first[0]) in viewer_jobs and str(later[0]) not in viewer_jobs

        # Past the bound (0.5 s since the last replayed transaction) the strict app reads the primary.
        wait_for(lambda: pending(strict.test_client()) == 5, timeout=10, message="a lagging replica's fallback")
        assert replica_state(strict_viewer) == "lagging"

        # Read your own write: after cancelling a job the actor's reads come from the primary.
        r = actor.post(f"/jobs/{first[0]}/cancel", data={"csrf_token": actor.csrf, "reason": "replica drill",
                                                           "request_key": uuid.uuid4().hex},
                       headers={"HX-Request": "true"})
        assert r.status_code == 200, r.get_data(as_text=True)[:500]
        actor_jobs = actor.get("/jobs/?status=pending").get_data(as_text=True)
        assert str(later[0]) in actor_jobs and str(first[0]) not in actor_jobs
        assert str(later[0]) not in viewer.get("/jobs/?status=pending").get_data(as_text=True)

        # Replay resumes: everyone reads the replica again and sees everything.
        with connect(read_url) as r:
            r.execute("SELECT pg_wal_replay_resume()")
        wait_for(lambda: caught_up(url, read_url), message="the replica to catch up")
        wait_for(lambda: str(later[0]) in viewer.get("/jobs/?status=pending").get_data(as_text=True), timeout=10,
                 message="the viewer to see the later jobs")
        wait_for(lambda: replica_state(strict_viewer) == "up", timeout=10, message="the strict app to use it again")
        actor_jobs = actor.get("/jobs/?status=pending").get_data(as_text=True)
        assert str(first[0]) not in actor_jobs, "the cancelled job, replayed on the replica"

        # The replica goes away: reads go to the primary, the page says so, nothing fails.
        replica.stop("immediate")
        enqueue(url, tenant, ["f"])
        wait_for(lambda: pending(app.test_client()) == 5, timeout=15, message="reads on the primary")  # 6 - 1 cancelled
        assert replica_state(viewer) == "down"
        assert viewer.get("/jobs/?status=pending").status_code == 200
        assert viewer.get("/dead/").status_code == 200
        assert viewer.get("/audit/").status_code == 200
    finally:
        for a, d in ((app, database), (strict, strict_db)):
            a.extensions["opsboard_reads"].close()
            d.close()
