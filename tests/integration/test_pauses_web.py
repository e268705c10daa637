"""Pause and resume on the dashboard (issue 28): roles, CSRF, the second confirmation,
the audit row, what the pages show."""
from __future__ import annotations

import uuid

import pytest

from opsboard import auth
from tests.conftest import connect


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


def _post(client, url, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    return client.post(url, data=data)


def _error_code(r) -> str:
    """The error code of a refused form (an HTML error page) or of a JSON answer."""
    if r.is_json:
        return r.get_json()["error"]
    import re
    found = re.search(r'<code dir="ltr">([a-z_]+)</code>', r.get_data(as_text=True))
    return found.group(1) if found else ""


def _held(db):
    return {(r["kind"], r["target"]) for r in db.execute("SELECT kind, target FROM pauses")}


def test_operator_staff_pause_and_resume_a_queue_from_queue_health(client, login_as, db):
    email = login_as("ops")
    page = client.get("/queues/").get_data(as_text=True)
    assert "Nothing is paused." in page
    form = client.get("/pauses/new?kind=queue&target=default&next=/queues/")
    assert form.status_code == 200 and 'name="reason"' in form.get_data(as_text=True)
    r = _post(client, "/pauses/pause", kind="queue", target="default", reason="db failover", next="/queues/",
              resume_at="2999-01-01T10:00")
    assert r.status_code == 303 and r.headers["Location"].endswith("/queues/")
    assert _held(db) == {("queue", "default")}
    page = client.get("/queues/").get_data(as_text=True)
    assert 'data-paused-target="default"' in page and "db failover" in page and email in page
    [row] = db.execute("SELECT * FROM audit_log WHERE action = 'pause'").fetchall()
    assert row["actor_label"] == email and row["reason"] == "db failover" and row["target_id"] == "default"
    r = _post(client, "/pauses/resume", kind="queue", target="default", reason="back", next="/queues/")
    assert r.status_code == 303 and _held(db) == set()
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'resume'").fetchone()["n"] == 1


def test_the_critical_queue_and_the_otp_type_need_the_confirmation_box(client, login_as, db):
    login_as("ops")
    assert 'name="confirm"' in client.get("/pauses/new?kind=queue&target=critical").get_data(as_text=True)
    assert 'name="confirm"' not in client.get("/pauses/new?kind=queue&target=bulk").get_data(as_text=True)
    for kind, target in (("queue", "critical"), ("type", "sms.otp")):
        r = _post(client, "/pauses/pause", kind=kind, target=target, reason="x")
        assert r.status_code == 400 and _held(db) == set()
    r = _post(client, "/pauses/pause", kind="type", target="sms.otp", reason="x", confirm="yes")
    assert r.status_code == 303 and _held(db) == {("type", "sms.otp")}


def test_without_csrf_nothing_is_paused(client, login_as, db):
    login_as("ops")
    r = client.post("/pauses/pause", data={"kind": "queue", "target": "bulk", "reason": "x",
                                            "request_key": str(uuid.uuid4())})
    assert r.status_code == 400 and _held(db) == set()


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_support_agents_and_authors_may_never_pause(client, login_as, db, role):
    login_as(role)
    auth.ensure_tenant(db, "acme")
    for kind, target in (("queue", "bulk"), ("tenant", "acme")):
        r = _post(client, "/pauses/pause", kind=kind, target=target, reason="x")
        assert r.status_code == 403
    assert client.get("/pauses/new?kind=queue&target=bulk").status_code == 403
    assert _held(db) == set()


def test_a_tenants_ops_may_pause_only_its_own_tenant(client, login_as, db):
    auth.ensure_tenant(db, "other")
    login_as("ops", tenant="acme", operator=False)
    assert _post(client, "/pauses/pause", kind="queue", target="bulk", reason="x").status_code == 403
    assert _post(client, "/pauses/pause", kind="type", target="test.record", reason="x").status_code == 403
    assert _post(client, "/pauses/pause", kind="tenant", target="other", reason="x").status_code == 403
    r = _post(client, "/pauses/pause", kind="tenant", target="acme", reason="our import floods", next="/tenants/")
    assert r.status_code == 303 and _held(db) == {("tenant", "acme")}
    acme = db.execute("SELECT id FROM tenants WHERE slug = 'acme'").fetchone()["id"]
    page = client.get(f"/tenants/{acme}").get_data(as_text=True)
    assert "our import floods" in page and 'class="inline resume-form"' in page
    # A denied attempt is on the record (outcome denied), the allowed one as done.
    rows = db.execute("SELECT outcome, target_id FROM audit_log WHERE action = 'pause' ORDER BY at").fetchall()
    assert ("done", "acme") in {(r["outcome"], r["target_id"]) for r in rows}
    assert "denied" in {r["outcome"] for r in rows}
    assert _post(client, "/pauses/resume", kind="tenant", target="acme", reason="done").status_code == 303
    assert _held(db) == set()


def test_the_deliveries_page_holds_a_provider(client, login_as, db):
    login_as("ops")
    page = client.get("/deliveries/").get_data(as_text=True)
    assert 'data-pause="provider:test_sms_gateway"' in page
    r = _post(client, "/pauses/pause", kind="provider", target="test_sms_gateway", reason="vendor outage",
              next="/deliveries/")
    assert r.status_code == 303
    page = client.get("/deliveries/").get_data(as_text=True)
    assert 'data-paused="provider:test_sms_gateway"' in page and "vendor outage" in page


def test_metrics_gauge_and_the_alerts_banner_show_what_is_paused(client, login_as, db):
    login_as("ops")
    assert _post(client, "/pauses/pause", kind="type", target="test.record", reason="failing").status_code == 303
    text = client.get("/metrics").get_data(as_text=True)
    assert 'opsboard_paused{kind="type",target="test.record"} 1.0' in text
    banner = client.get("/alerts/_banner", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert 'data-paused-count="1"' in banner and "test.record" in banner
    assert _post(client, "/pauses/resume", kind="type", target="test.record", reason="ok").status_code == 303
    assert "opsboard_paused{" not in client.get("/metrics").get_data(as_text=True)


def _seed_jobs(db, slug, n, type_="test.record"):
    from opsboard import jobqueue
    t = auth.ensure_tenant(db, slug)["id"]
    jobqueue.enqueue_many(db, [jobqueue.NewJob(type_, {"key": f"{slug}{i}", "ms": 1}, t) for i in range(n)])
    return t


def test_bulk_cancel_preview_count_links_and_states_agree(client, login_as, db):
    login_as("ops")
    acme = _seed_jobs(db, "acme", 4)
    _seed_jobs(db, "beta", 3)
    _seed_jobs(db, "acme2", 2, "test.slow")
    page = client.get("/jobs/cancel-many/confirm?type=test.record&queue=default").get_data(as_text=True)
    assert 'data-count="7"' in page
    r = client.post("/jobs/cancel-many", data={"type": "test.record", "queue": "default", "reason": "bad batch",
                                               "csrf_token": client.csrf, "request_key": str(uuid.uuid4())},
                    headers={"HX-Request": "true"})
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    cancelled = {row["id"] for row in db.execute("SELECT id FROM jobs WHERE status = 'cancelled'")}
    assert 'data-cancelled="7"' in html and len(cancelled) == 7
    assert all(f"/jobs/{i}" in html for i in cancelled)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'").fetchone()["n"] == 2
    [row] = db.execute("SELECT * FROM audit_log WHERE action = 'job.cancel_many'").fetchall()
    assert set(row["after"]["ids"]) == {str(i) for i in cancelled}
    assert acme


def test_bulk_cancel_roles_and_csrf(client, login_as, db):
    _seed_jobs(db, "other", 2)
    acme = _seed_jobs(db, "acme", 3)
    login_as("ops", tenant="acme", operator=False)
    assert 'data-count="3"' in client.get("/jobs/cancel-many/confirm").get_data(as_text=True)  # own tenant only
    r = client.post("/jobs/cancel-many", data={"reason": "x", "request_key": str(uuid.uuid4())})
    assert r.status_code == 400  # no CSRF token
    r = client.post("/jobs/cancel-many", data={"reason": "ours", "csrf_token": client.csrf,
                                               "request_key": str(uuid.uuid4())})
    assert r.status_code == 200
    rows = db.execute("SELECT tenant_id, status FROM jobs").fetchall()
    assert {(x["tenant_id"] == acme, x["status"]) for x in rows} == {(True, "cancelled"), (False, "pending")}


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_bulk_cancel_is_not_for_agents_or_authors(client, login_as, db, role):
    _seed_jobs(db, "acme", 1)
    login_as(role)
    assert client.get("/jobs/cancel-many/confirm").status_code == 403
    r = client.post("/jobs/cancel-many", data={"reason": "x", "csrf_token": client.csrf,
                                               "request_key": str(uuid.uuid4())})
    assert r.status_code == 403
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'cancelled'").fetchone()["n"] == 0


def test_ops_staff_change_a_types_limit_live_with_the_old_value_shown_and_audited(client, login_as, db):
    login_as("ops")
    page = client.get("/pauses/limit?kind=type&target=test.limited&next=/queues/").get_data(as_text=True)
    assert 'data-current-limit="3"' in page
    r = _post(client, "/pauses/limit", kind="type", target="test.limited", value="1", reason="db hot", next="/queues/")
    assert r.status_code == 303
    page = client.get("/pauses/limit?kind=type&target=test.limited").get_data(as_text=True)
    assert 'data-current-limit="1"' in page
    [row] = db.execute("SELECT before, after FROM audit_log WHERE action = 'limit.set'").fetchall()
    assert row["before"]["value"] == 3 and row["after"]["value"] == 1
    assert _post(client, "/pauses/limit", kind="type", target="test.limited", value="x", reason="r").status_code == 400
    assert _post(client, "/pauses/limit", kind="type", target="test.limited", value="", reason="ok").status_code == 303
    assert db.execute("SELECT count(*) AS n FROM limit_overrides").fetchone()["n"] == 0


def test_a_tenants_ops_may_not_change_limits(client, login_as, db):
    login_as("ops", tenant="acme", operator=False)
    assert _post(client, "/pauses/limit", kind="type", target="test.limited", value="1", reason="x").status_code == 403


def test_ops_staff_change_a_queues_slots_live_with_the_old_value_audited_and_bad_input_refused(client, login_as, db):
    login_as("ops")
    page = client.get("/queues/").get_data(as_text=True)
    assert 'data-slots="bulk"' in page
    page = client.get("/pauses/limit?kind=queue&target=bulk&next=/queues/").get_data(as_text=True)
    assert 'data-current-limit=""' in page and 'max="1000"' in page
    r = _post(client, "/pauses/limit", kind="queue", target="bulk", value="6", reason="reports pile up", next="/queues/")
    assert r.status_code == 303
    assert 'data-current-limit="6"' in client.get("/pauses/limit?kind=queue&target=bulk").get_data(as_text=True)
    r = _post(client, "/pauses/limit", kind="queue", target="bulk", value="2", reason="too much")
    assert r.status_code == 303
    rows = db.execute("SELECT before, after FROM audit_log WHERE action = 'limit.set' ORDER BY at, id").fetchall()
    assert [(x["before"]["value"], x["after"]["value"]) for x in rows] == [(None, 6), (6, 2)]
    for bad in ("0", "1001", "x", "2.5", "-3", "٣", "99999999999999999999"):
        r = _post(client, "/pauses/limit", kind="queue", target="bulk", value=bad, reason="r")
        assert r.status_code == 400 and _error_code(r) == "invalid_limit", bad
    r = _post(client, "/pauses/limit", kind="queue", target="nope", value="2", reason="r")
    assert r.status_code == 404
    assert db.execute("SELECT value FROM limit_overrides WHERE kind = 'queue'").fetchone()["value"] == 2


@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_slots_and_tenant_limits_are_never_for_agents_or_authors(client, login_as, db, role):
    login_as(role)
    acme = auth.ensure_tenant(db, "acme")
    assert _post(client, "/pauses/limit", kind="queue", target="bulk", value="2", reason="x").status_code == 403
    assert _post(client, f"/tenants/{acme['id']}/limits", max_running="2", reason="x").status_code == 403
    assert db.execute("SELECT count(*) AS n FROM limit_overrides").fetchone()["n"] == 0
    assert db.execute("SELECT max_running FROM tenants WHERE slug = 'acme'").fetchone()["max_running"] is None


def test_tenant_limits_from_the_tenant_page_own_tenant_only_audited_with_the_old_value(client, login_as, db):
    other = auth.ensure_tenant(db, "other")
    login_as("ops", tenant="acme", operator=False)
    acme = db.execute("SELECT id FROM tenants WHERE slug = 'acme'").fetchone()["id"]
    assert _post(client, "/pauses/limit", kind="queue", target="bulk", value="2", reason="x").status_code == 403
    page = client.get(f"/tenants/{acme}").get_data(as_text=True)
    assert 'id="tenant-limits-form"' in page and 'data-limits="::"' in page
    r = _post(client, f"/tenants/{other['id']}/limits", max_running="1", reason="x")
    assert r.status_code == 403
    assert db.execute("SELECT max_running FROM tenants WHERE slug = 'other'").fetchone()["max_running"] is None
    r = _post(client, f"/tenants/{acme}/limits", rate="50", burst="100", max_running="4", reason="our import")
    assert r.status_code == 303
    assert 'data-limits="50.0:100:4"' in client.get(f"/tenants/{acme}").get_data(as_text=True)
    r = _post(client, f"/tenants/{acme}/limits", rate="", burst="100", max_running="2", reason="slower")
    assert r.status_code == 303
    rows = db.execute("SELECT tenant_id, before, after FROM audit_log WHERE action = 'tenant.limits' "
                      "ORDER BY at, id").fetchall()
    assert [(x["before"]["max_running"], x["after"]["max_running"]) for x in rows] == [(None, 4), (4, 2)]
    assert rows[1]["before"]["rate"] == 50.0 and rows[1]["after"]["rate"] is None and rows[0]["tenant_id"] == acme
    for field, bad in (("rate", "0"), ("rate", "nan"), ("rate", "inf"), ("burst", "x"), ("max_running", "0"),
                       ("max_running", "100001")):
        r = _post(client, f"/tenants/{acme}/limits", reason="r", **{field: bad})
        assert r.status_code == 400 and _error_code(r) == "invalid_limit", (field, bad)
    assert _post(client, f"/tenants/{acme}/limits", max_running="3", reason=" ").status_code == 400
    r = client.post(f"/tenants/{acme}/limits", headers={"Accept": "application/json"},
                    data={"max_running": "-1", "reason": "r", "csrf_token": client.csrf, "request_key": str(uuid.uuid4())})
    assert r.status_code == 400 and r.get_json()["error"] == "invalid_limit"
    assert _post(client, "/tenants/not-a-uuid/limits", max_running="3", reason="r").status_code == 404
    r = client.post(f"/tenants/{acme}/limits", data={"max_running": "9", "reason": "x", "request_key": str(uuid.uuid4())})
    assert r.status_code == 400  # no CSRF token
    assert db.execute("SELECT max_running FROM tenants WHERE slug = 'acme'").fetchone()["max_running"] == 2


def test_bulk_cancel_preview_counts_up_to_its_cap(client, login_as, db, monkeypatch):
    """A backlog of millions is not counted for the preview: past the cap it says "N+" (issue 24)."""
    from opsboard.web import jobs as jobs_view
    monkeypatch.setattr(jobs_view, "COUNT_CAP", 5)
    login_as("ops")
    _seed_jobs(db, "acme", 7)
    page = client.get("/jobs/cancel-many/confirm?type=test.record").get_data(as_text=True)
    assert 'data-count="6"' in page and "5+" in page   # counted to the cap and one past it, no further
    monkeypatch.setattr(jobs_view, "COUNT_CAP", 7)
    page = client.get("/jobs/cancel-many/confirm?type=test.record").get_data(as_text=True)
    assert 'data-count="7"' in page and "7+" not in page


@pytest.mark.parametrize("method, path", [("GET", "/pauses/new"), ("POST", "/pauses/pause"), ("POST", "/pauses/resume")])
def test_a_tenant_ops_user_cannot_tell_another_tenant_from_one_that_does_not_exist(client, login_as, db,
                                                                                  method, path):
    """The permission is checked before the lookup (issue 51): for a tenant's ops user, another
    tenant's slug and an unknown slug answer alike."""
    auth.ensure_tenant(db, "acme")
    auth.ensure_tenant(db, "globex")
    login_as("ops", tenant="acme", operator=False)
    answers = []
    for slug in ("globex", "no-such-tenant-" + uuid.uuid4().hex[:6]):
        data = {"kind": "tenant", "target": slug, "reason": "checking", "limit": "2"}
        if method == "GET":
            r = client.get(path, query_string=data, headers={"Accept": "application/json"})
        else:
            r = client.post(path, data={**data, "csrf_token": client.csrf, "request_key": str(uuid.uuid4())},
                            headers={"Accept": "application/json"})
        answers.append((r.status_code, _error_code(r), r.get_json().get("message") if r.is_json else None))
    assert answers[0] == answers[1] and answers[0][0] == 403, answers
    assert ("tenant", "globex") not in _held(db)
