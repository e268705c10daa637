"""POST /api/v1/workflows and GET /api/v1/workflows/{id} (issue 45), and the job page's recorded result."""
from __future__ import annotations

import html
import uuid

import pytest

from opsboard import apikeys, audit, auth, jobqueue
from tests.conftest import connect


@pytest.fixture
def key_for(app):
    url = app.extensions["test_db_url"]

    def make(slug: str | None = None):
        with connect(url) as c:
            tenant = auth.ensure_tenant(c, slug or f"t-{uuid.uuid4().hex[:6]}")
            secret, _ = apikeys.create(c, tenant["id"], "test", audit.Actor("test"))
        return secret, tenant
    return make


def bearer(secret: str, **extra) -> dict:
    return {"Authorization": f"Bearer {secret}", **extra}


DIAMOND = {"name": "diamond", "tasks": [
    {"name": "a", "type": "diag.noop", "payload": {}},
    {"name": "b", "type": "diag.noop", "payload": {}, "deps": ["a"]},
    {"name": "c", "type": "diag.noop", "payload": {}, "deps": ["a"], "on_dep_failure": "run"},
    {"name": "d", "type": "diag.noop", "payload": {}, "deps": ["b", "c"]}]}


def test_a_workflow_is_created_once_per_key_and_read_in_its_tenant_only(client, key_for, app):
    secret, tenant = key_for()
    r = client.post("/api/v1/workflows", json=DIAMOND, headers=bearer(secret, **{"Idempotency-Key": "wf-1"}))
    assert r.status_code == 202, r.json
    body = r.json
    assert body["state"] == "running" and body["progress"] == {"done": 0, "total": 4, "failed": 0}
    states = {t["name"]: t["state"] for t in body["tasks"]}
    assert states == {"a": "ready", "b": "waiting", "c": "waiting", "d": "waiting"}
    again = client.post("/api/v1/workflows", json=DIAMOND, headers=bearer(secret, **{"Idempotency-Key": "wf-1"}))
    assert again.status_code == 202 and again.json["id"] == body["id"]
    assert again.headers.get("Idempotent-Replayed") == "true"
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM workflows").fetchone()["n"] == 1
    got = client.get(f"/api/v1/workflows/{body['id']}", headers=bearer(secret))
    assert got.status_code == 200 and got.json["tasks"][3]["deps"] == ["b", "c"]
    other, _ = key_for()
    assert client.get(f"/api/v1/workflows/{body['id']}", headers=bearer(other)).status_code == 404
    assert client.get("/api/v1/workflows/not-a-uuid", headers=bearer(secret)).status_code == 404
    assert client.get(f"/api/v1/workflows/{body['id']}").status_code == 401


@pytest.mark.parametrize("body, status, code", [
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.noop", "payload": {}},
                             {"name": "a", "type": "diag.noop", "payload": {}}]}, 400, "duplicate_task"),
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.noop", "payload": {}, "deps": ["x"]}]}, 400,
     "unknown_dependency"),
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.noop", "payload": {}, "deps": ["b"]},
                             {"name": "b", "type": "diag.noop", "payload": {}, "deps": ["a"]}]}, 400, "cycle"),
    ({"name": "w", "tasks": []}, 400, "invalid_field"),
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.noop", "payload": {}, "extra": 1}]}, 400, "unknown_field"),
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.sleep", "payload": {"ms": "slow"}}]}, 422, None),
    ({"name": "w", "tasks": [{"name": "a", "type": "wft.grow", "payload": {}}]}, 422, "job_type_not_public"),
    ({"name": "w", "tasks": [{"name": "a", "type": "diag.noop", "payload": {}, "on_dep_failure": "x"}]}, 400,
     "invalid_policy"),
])
def test_bad_workflows_are_4xx_with_a_code_and_store_nothing(client, key_for, app, body, status, code):
    secret, _ = key_for()
    r = client.post("/api/v1/workflows", json=body, headers=bearer(secret))
    assert r.status_code == status, r.json
    if code:
        assert r.json["error"] == code
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM workflows").fetchone()["n"] == 0
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_the_job_page_shows_the_recorded_result(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        job = jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
        c.execute("UPDATE jobs SET result = %s::jsonb WHERE id = %s", ('{"rows": 12, "note": "گزارش"}', job["id"]))
        plain = jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
    login_as("ops")
    page = html.unescape(client.get(f"/jobs/{job['id']}").get_data(as_text=True))
    assert "data-job-result" in page and '"rows": 12' in page and "گزارش" in page
    assert "data-job-result" not in client.get(f"/jobs/{plain['id']}").get_data(as_text=True)
