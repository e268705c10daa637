"""The Workers page's per-process controls (issue 44), obeyed by a real ``python -m worker``:
set one worker's slots, quiet it (it claims nothing; un-quieted it claims again), stop it (a
graceful drain, exit 0, its rows gone).  Operator staff with jobs.pause only; CSRF; audited."""
from __future__ import annotations

import time
import uuid

import pytest

from opsboard import auth, jobqueue
from tests.conftest import connect, wait_for
from tests.support import dashboard as seed


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


def _post(client, url, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    return client.post(url, data=data)


def _worker_id(db) -> str:
    row = wait_for(lambda: db.execute("SELECT id FROM workers").fetchone(), message="the worker's row")
    return row["id"]


def _status(db, job_id) -> str:
    return db.execute("SELECT status::text AS s FROM jobs WHERE id = %s", (job_id,)).fetchone()["s"]


def test_an_operator_resizes_quiets_and_stops_a_real_worker(app, client, login_as, db, start_worker):
    url = app.extensions["test_db_url"]
    proc = start_worker(url, "--queues", "default=2", "--no-services", OPSBOARD_POLL_INTERVAL="0.5")
    wid = _worker_id(db)
    login_as("ops")
    page = client.get("/workers/").get_data(as_text=True)
    assert f'data-controls="{wid}"' in page
    assert client.get(f"/workers/{wid}/controls").status_code == 200

    # One worker's slots.
    r = _post(client, f"/workers/{wid}/slots", queue="default", slots="3", reason="more room for the backlog")
    assert r.status_code == 303
    wait_for(lambda: db.execute("SELECT queues->>'default' AS n FROM workers WHERE id = %s", (wid,))
             .fetchone()["n"] == "3", message="the worker running 3 slots")
    assert "default: ۳" not in client.get("/workers/").get_data(as_text=True)  # en page: Latin digits
    assert "default: 3 set here" in client.get("/workers/").get_data(as_text=True)

    # Quiet: a job enqueued now waits; claiming again runs it.
    r = _post(client, f"/workers/{wid}/quiet", quiet="yes", reason="draining this host")
    assert r.status_code == 303
    wait_for(lambda: "quiet: claiming nothing more" in proc.log_path.read_text(), message="the worker going quiet")
    tenant = seed.tenant(db, "acme")
    (job_id,) = jobqueue.enqueue_many(db, [jobqueue.NewJob("diag.noop", {}, tenant)])
    time.sleep(2.0)  # four polls and the enqueue's notification: a worker that claimed would have
    assert _status(db, job_id) == "pending"
    assert "data-quiet" in client.get("/workers/").get_data(as_text=True)
    r = _post(client, f"/workers/{wid}/quiet", quiet="no", reason="host is fine")
    assert r.status_code == 303
    wait_for(lambda: _status(db, job_id) == "succeeded", message="the job run once claiming again")

    # Stop: drains and exits 0, as on SIGTERM; its rows go.
    r = _post(client, f"/workers/{wid}/stop", reason="host maintenance")
    assert r.status_code == 303
    assert proc.wait(30) == 0
    assert "stop asked on the Workers page" in proc.log_path.read_text()
    assert db.execute("SELECT count(*) AS n FROM workers").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM worker_commands").fetchone()["n"] == 0

    audit = db.execute("SELECT action, reason, target_id FROM audit_log WHERE action LIKE 'worker.%%' "
                       "ORDER BY at, id").fetchall()
    assert [(a["action"], a["reason"]) for a in audit] == [
        ("worker.slots", "more room for the backlog"), ("worker.quiet", "draining this host"),
        ("worker.unquiet", "host is fine"), ("worker.stop", "host maintenance")]
    assert {a["target_id"] for a in audit} == {wid}


def test_only_operator_staff_with_the_permission_control_workers(app, client, login_as, db):
    seed.worker(db, "host-1:100:w1", {"default": 2})
    login_as("ops", tenant="acme", operator=False)  # a tenant's ops: not the platform's workers
    for path, data in (("quiet", {"quiet": "yes"}), ("stop", {}), ("slots", {"queue": "default", "slots": "3"})):
        r = _post(client, f"/workers/host-1:100:w1/{path}", reason="x", **data)
        assert r.status_code == 403, path
    assert db.execute("SELECT count(*) AS n FROM worker_commands").fetchone()["n"] == 0


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_other_roles_may_not(app, client, login_as, db, role):
    seed.worker(db, "host-1:100:w1", {"default": 2})
    login_as(role)
    r = _post(client, "/workers/host-1:100:w1/stop", reason="x")
    assert r.status_code == 403
    assert db.execute("SELECT count(*) AS n FROM worker_commands").fetchone()["n"] == 0


def test_csrf_reason_bounds_and_unknown_workers(app, client, login_as, db):
    seed.worker(db, "host-1:100:w1", {"default": 2})
    login_as("ops")
    json = {"Accept": "application/json"}
    r = client.post("/workers/host-1:100:w1/stop", data={"reason": "x", "request_key": str(uuid.uuid4())})
    assert r.status_code == 400
    r = _post(client, "/workers/host-1:100:w1/stop", reason=" ")
    assert r.status_code == 400
    for bad in ("0", "1001", "x", "-1"):
        r = client.post("/workers/host-1:100:w1/slots", headers=json, data={
            "queue": "default", "slots": bad, "reason": "x", "csrf_token": client.csrf, "request_key": str(uuid.uuid4())})
        assert r.status_code == 400 and r.get_json()["error"] == "invalid_slots", bad
    r = client.post("/workers/host-1:100:w1/slots", headers=json, data={
        "queue": "bulk", "slots": "2", "reason": "x", "csrf_token": client.csrf, "request_key": str(uuid.uuid4())})
    assert r.status_code == 400 and r.get_json()["error"] == "invalid_queue"
    r = client.post("/workers/nobody/stop", headers=json, data={
        "reason": "x", "csrf_token": client.csrf, "request_key": str(uuid.uuid4())})
    assert r.status_code == 404 and r.get_json()["error"] == "not_found"
    assert db.execute("SELECT count(*) AS n FROM worker_commands").fetchone()["n"] == 0
    # Persian digits are a number too; a double submit acts once.
    key = str(uuid.uuid4())
    for _ in range(2):
        r = _post(client, "/workers/host-1:100:w1/slots", queue="default", slots="۴", reason="x", request_key=key)
        assert r.status_code == 303
    assert db.execute("SELECT slots FROM worker_commands").fetchone()["slots"] == {"default": 4}
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'worker.slots'").fetchone()["n"] == 1
