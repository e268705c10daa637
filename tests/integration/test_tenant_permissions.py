"""Issue 42: every permission is checked in the tenant of the object acted on.

For each route family, a user of another tenant (globex) who holds the permission there (admin, ops),
or not at all (template author, support agent), or who also holds a weaker role in the object's own
tenant (acme), gets 403 or 404 on acme's job, dead letter, ticket, attachment, alert, webhook endpoint,
API key, report run, tenant limits and holds; and nothing of acme's changes (the rows are compared
before and after, the audit log included: only ``denied`` records may appear).
"""
from __future__ import annotations

import uuid

import pytest

from opsboard import apikeys, audit, auth, reports
from opsboard.deliveries import webhooks
from opsboard.tickets import service
from tests.conftest import connect, make_config
from tests.support import dashboard as seed
from tests.support.tickets import make_desk

JSON = {"Accept": "application/json"}
PUBLIC = "http://93.184.216.34/hooks/opsboard"
PASSWORD = "correct horse battery"

#: Who signs in: memberships as (role, tenant slug).  Globex is the user's own tenant; the mixed
#: profiles also hold a role in acme that does not carry the permission the route needs.
PROFILES = {
    "admin": [("admin", "globex")],
    "ops": [("ops", "globex")],
    "template_author": [("template_author", "globex")],
    "support_agent": [("support_agent", "globex")],
    "admin+acme_author": [("admin", "globex"), ("template_author", "acme")],
    "ops+acme_agent": [("ops", "globex"), ("support_agent", "acme")],
}
#: For tickets an acme agent may of course work acme's tickets: not a profile there.
TICKET_PROFILES = [p for p in PROFILES if p != "ops+acme_agent"]


@pytest.fixture
def app(db_url, tmp_path):
    from opsboard.db import Database
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=4).open()
    application = create_app({"OPSBOARD": make_config(database_url=db_url, storage_dir=tmp_path / "storage"),
                              "DATABASE": database, "TESTING": True})
    application.extensions["test_db_url"] = db_url
    yield application
    database.close()


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


@pytest.fixture
def acme(db):
    """Acme's objects: a dead and a pending job, an alert, a ticket, a webhook endpoint, an API key, a report run."""
    desk = make_desk(db, "acme")
    tid = desk.tenant["id"]
    dead, pending = seed.jobs(db, tid, 2, payload={"note": "acme-secret-note"})
    seed.kill(db, [dead])
    alert = uuid.uuid4()
    db.execute("""INSERT INTO alerts (id, rule, key, tenant_id, severity, summary, opened_at, last_seen_at)
                  VALUES (%s, 'x', 'k', %s, 'warning', 'acme-alert-summary', now(), now())""", (alert, tid))
    ticket = service.create_ticket(db, desk.caller("requester"), tenant_id=tid, subject="acme-ticket-subject",
                                   body="acme-ticket-body", category="billing")
    endpoint = webhooks.create_endpoint(db, tid, PUBLIC, ["order.paid"])
    _secret, key = apikeys.create(db, tid, "acme-key", audit.Actor("test"))
    run = reports.request_report(db, tid, "job_activity", {"date_from": "2026-01-01", "date_to": "2026-01-02"},
                                 audit.Actor("test"))
    auth.ensure_tenant(db, "globex")
    return {"tenant": tid, "desk": desk, "dead": dead, "pending": pending, "alert": alert, "ticket": ticket["id"],
            "endpoint": endpoint["id"], "key": key["id"], "run": run["id"]}


def _sign_in(app, client, login_as, profile: str) -> str:
    email = f"{profile.replace('+', '-').replace('_', '-')}-{uuid.uuid4().hex[:6]}@example.test"
    memberships = PROFILES[profile]
    with connect(app.extensions["test_db_url"]) as c:
        for role, slug in memberships[1:]:
            auth.ensure_tenant(c, slug)
            auth.create_user(c, email, PASSWORD, role, slug)
    role, slug = memberships[0]
    return login_as(role, tenant=slug, operator=False, email=email)


def _snapshot(db, tid) -> dict:
    """Every row of acme's a route could touch."""
    def rows(sql: str) -> list:
        return [tuple(r.values()) for r in db.execute(sql, {"t": tid}).fetchall()]

    return {
        "jobs": rows("SELECT id, status::text, attempts, available_at, replay_of FROM jobs WHERE tenant_id = %(t)s "
                     "ORDER BY id"),
        "resolutions": rows("SELECT r.job_id, r.resolution FROM job_resolutions r JOIN jobs j ON j.id = r.job_id "
                            "WHERE j.tenant_id = %(t)s"),
        "alerts": rows("SELECT id, acknowledged_at, ack_reason, closed_at FROM alerts WHERE tenant_id = %(t)s"),
        "tickets": rows("SELECT id, status, priority, assignee_id, updated_at FROM tickets WHERE tenant_id = %(t)s"),
        "messages": rows("SELECT id, kind FROM ticket_messages WHERE tenant_id = %(t)s ORDER BY id"),
        "endpoints": rows("SELECT id, url, enabled, secrets::text FROM webhook_endpoints WHERE tenant_id = %(t)s "
                          "ORDER BY id"),
        "keys": rows("SELECT id, name, revoked_at FROM api_keys WHERE tenant_id = %(t)s ORDER BY id"),
        "runs": rows("SELECT id, status FROM report_runs WHERE tenant_id = %(t)s ORDER BY id"),
        "tenant": rows("SELECT enqueue_rate, enqueue_burst, max_running, pii_mode FROM tenants WHERE id = %(t)s"),
        # Holds and live limits: acme's, and the platform's (queues, types, providers: operator staff only).
        "pauses": rows("SELECT kind, target, reason FROM pauses ORDER BY kind, target"),
        "limits": rows("SELECT kind, target, value FROM limit_overrides ORDER BY kind, target"),
        "outbox": rows("SELECT id FROM outbox_events WHERE tenant_id = %(t)s ORDER BY id"),
        "audit": rows("SELECT id, action FROM audit_log WHERE tenant_id = %(t)s "
                      "AND outcome IS DISTINCT FROM 'denied' ORDER BY id"),
    }


#: What must never show in a refusal to another tenant's user.
SECRETS = ("acme-secret-note", "acme-alert-summary", "acme-ticket-subject", "acme-ticket-body", "acme-key")


def _refused(r, path):
    body = r.get_data(as_text=True)
    assert r.status_code in (403, 404), (path, r.status_code, body[:300])
    assert not [s for s in SECRETS if s in body], path


def _post(client, path, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    data.setdefault("reason", "checked it")
    return client.post(path, data=data, headers=JSON)


def _check(client, db, acme, gets=(), posts=()):
    before = _snapshot(db, acme["tenant"])
    for path in gets:
        _refused(client.get(path, headers=JSON), path)
    for path, data in posts:
        _refused(_post(client, path, **data), path)
    assert _snapshot(db, acme["tenant"]) == before


# ---------------------------------------------------------------- families

@pytest.mark.parametrize("profile", PROFILES)
def test_jobs_and_dead_letters(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    dead, pending = acme["dead"], acme["pending"]
    _check(client, db, acme,
           gets=[f"/jobs/{dead}", f"/jobs/{dead}/payload"],
           posts=[(f"/jobs/{dead}/replay", {}), (f"/jobs/{dead}/resolve", {"resolution": "resolved"}),
                  (f"/jobs/{dead}/resolve", {"resolution": "ignored"}), (f"/jobs/{pending}/cancel", {}),
                  (f"/jobs/{pending}/run-now", {}),
                  # issue 44: ticked jobs (confirmation and action), each action, and a mix with a job of
                  # the user's own tenant's scope: refused as a whole
                  *[(path, {"action": action, "ids": [str(dead), str(pending)]})
                    for path in ("/jobs/selected/confirm", "/jobs/selected")
                    for action in ("replay", "cancel", "discard", "run_now")]])
    # The bulk actions take a filter, not an object: acme's jobs are outside the user's scope (nothing
    # matches, or the role is refused), and nothing changes.
    before = _snapshot(db, acme["tenant"])
    for path in ("/jobs/replay-many", "/jobs/cancel-many", "/jobs/purge"):
        r = _post(client, path, tenant_id=str(acme["tenant"]))
        assert r.status_code in (200, 403), (path, r.status_code)
    for path in (f"/jobs/replay-many/confirm?tenant_id={acme['tenant']}",
                 f"/jobs/cancel-many/confirm?tenant_id={acme['tenant']}",
                 f"/jobs/purge/confirm?tenant_id={acme['tenant']}&older_than_days=0",
                 f"/dead/?tenant_id={acme['tenant']}", f"/jobs/?tenant_id={acme['tenant']}"):
        r = client.get(path)
        assert r.status_code in (200, 403), path
        assert str(dead) not in r.get_data(as_text=True) and str(pending) not in r.get_data(as_text=True), path
    assert _snapshot(db, acme["tenant"]) == before


@pytest.mark.parametrize("profile", PROFILES)
def test_alerts(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    _check(client, db, acme, gets=[f"/alerts/{acme['alert']}"], posts=[(f"/alerts/{acme['alert']}/ack", {})])
    assert "acme-alert-summary" not in client.get("/alerts/_list").get_data(as_text=True)


@pytest.mark.parametrize("profile", TICKET_PROFILES)
def test_tickets_and_attachments(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    t = acme["ticket"]
    agent = acme["desk"].agent.id
    _check(client, db, acme,
           gets=[f"/tickets/{t}", f"/tickets/{t}/attachments/{uuid.uuid4()}"],
           posts=[(f"/tickets/{t}/act/note", {"body": "x"}), (f"/tickets/{t}/act/reply", {"body": "x"}),
                  (f"/tickets/{t}/act/assign", {"assignee_id": str(agent)}),
                  (f"/tickets/{t}/act/set_priority", {"priority": "urgent"}),
                  (f"/tickets/{t}/act/resolve", {"resolution_code": "fixed", "resolution_summary": "x"})])
    r = client.get("/tickets/")
    assert r.status_code == 403 or "acme-ticket-subject" not in r.get_data(as_text=True)


@pytest.mark.parametrize("profile", PROFILES)
def test_webhook_endpoints(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    e = acme["endpoint"]
    _check(client, db, acme,
           posts=[("/webhooks/", {"tenant_id": str(acme["tenant"]), "url": PUBLIC, "event_types": "*"}),
                  (f"/webhooks/{e}/disable", {}), (f"/webhooks/{e}/enable", {}), (f"/webhooks/{e}/rotate", {}),
                  (f"/webhooks/{e}/delete", {})])
    r = client.get("/webhooks/")
    assert r.status_code == 403 or str(e) not in r.get_data(as_text=True)


@pytest.mark.parametrize("profile", PROFILES)
def test_api_keys(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    _check(client, db, acme,
           posts=[("/api-keys/", {"tenant_id": str(acme["tenant"]), "name": "mine now"}),
                  (f"/api-keys/{acme['key']}/revoke", {})])
    r = client.get("/api-keys/")
    assert r.status_code == 403 or "acme-key" not in r.get_data(as_text=True)


@pytest.mark.parametrize("profile", PROFILES)
def test_reports(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    run = acme["run"]
    _check(client, db, acme,
           gets=[f"/reports/{run}", f"/reports/{run}/download"],
           posts=[("/reports/", {"tenant_id": str(acme["tenant"]), "kind": "job_activity",
                                 "date_from": "2026-01-01", "date_to": "2026-01-02"})])
    r = client.get("/reports/_runs")
    assert r.status_code == 403 or str(run) not in r.get_data(as_text=True)


@pytest.mark.parametrize("profile", PROFILES)
def test_tenant_limits_and_holds(app, client, login_as, db, acme, profile):
    _sign_in(app, client, login_as, profile)
    tid = acme["tenant"]
    _check(client, db, acme,
           gets=[f"/tenants/{tid}", "/pauses/new?kind=tenant&target=acme"],
           posts=[(f"/tenants/{tid}/limits", {"rate": "1", "burst": "1", "max_running": "1"}),
                  ("/pauses/pause", {"kind": "tenant", "target": "acme"}),
                  ("/pauses/resume", {"kind": "tenant", "target": "acme"}),
                  # The platform's own: a tenant's staff hold nothing of it.
                  ("/pauses/pause", {"kind": "queue", "target": "default"}),
                  ("/pauses/pause", {"kind": "type", "target": "diag.noop"}),
                  ("/pauses/limit", {"kind": "queue", "target": "default", "value": "1"})])


@pytest.mark.parametrize("profile", PROFILES)
def test_lists_and_logs_show_nothing_of_another_tenant(app, client, login_as, db, acme, profile):
    """The read-only pages take the user's scope of their own permission: acme's rows are not there."""
    _sign_in(app, client, login_as, profile)
    ids = [str(acme[k]) for k in ("dead", "pending", "alert", "ticket", "endpoint", "key", "run")]
    for path in ("/audit/", f"/audit/?target_id={acme['dead']}", "/deliveries/", "/notifications/", "/queues/",
                 "/tenants/", "/reports/", "/reports/schedules", "/dead/", "/jobs/", "/alerts/_banner"):
        r = client.get(path)
        assert r.status_code in (200, 403), path
        html = r.get_data(as_text=True)
        assert not [s for s in (*ids, *SECRETS) if s in html], path


def test_another_tenants_api_key_reaches_nothing(app, client, db, acme):
    """/api/v1: the key's tenant is the scope of every lookup; another tenant's ids answer 404."""
    globex = auth.ensure_tenant(db, "globex")
    secret, _row = apikeys.create(db, globex["id"], "globex-key", audit.Actor("test"))
    bearer = {"Authorization": f"Bearer {secret}"}
    before = _snapshot(db, acme["tenant"])
    e = acme["endpoint"]
    for method, path in (("GET", f"/api/v1/jobs/{acme['dead']}"), ("GET", f"/api/v1/webhooks/{e}"),
                         ("POST", f"/api/v1/webhooks/{e}/disable"), ("POST", f"/api/v1/webhooks/{e}/enable"),
                         ("POST", f"/api/v1/webhooks/{e}/rotate-secret"), ("DELETE", f"/api/v1/webhooks/{e}")):
        r = client.open(path, method=method, headers=bearer)
        assert r.status_code == 404, (method, path, r.get_json())
    assert str(e) not in client.get("/api/v1/webhooks", headers=bearer).get_data(as_text=True)
    assert _snapshot(db, acme["tenant"]) == before


def test_schedules_show_a_tenant_only_its_own_and_no_platform_counts(conn, monkeypatch):
    """The schedules page: a schedule bound to acme is acme's; a per-tenant schedule's job count
    (one job per tenant of the platform) is for operator staff."""
    from opsboard import schedules
    from opsboard.catalogue import active

    acme, globex = auth.ensure_tenant(conn, "acme"), auth.ensure_tenant(conn, "globex")
    bound = schedules.Schedule("acme.private_export", "0 3 * * *", "UTC", "diag.noop", lambda slot, t: {},
                               tenant_slug="acme")
    monkeypatch.setitem(active().schedules, bound.name, bound)
    conn.execute("INSERT INTO schedule_state (name, last_slot, last_fired_at, last_jobs) "
                 "VALUES ('reports.nightly_activity', now(), now(), 1234)")

    def shown(scope):
        return {s["name"]: s for s in schedules.overview(conn, scope)}

    staff = shown(auth.TenantScope(all=True))
    assert "acme.private_export" in staff and staff["reports.nightly_activity"]["last_jobs"] == 1234
    theirs = shown(auth.TenantScope(all=False, ids=(globex["id"],)))
    assert "acme.private_export" not in theirs
    assert theirs["reports.nightly_activity"]["last_jobs"] is None
    assert "acme.private_export" in shown(auth.TenantScope(all=False, ids=(acme["id"],)))


def test_a_report_request_key_spent_on_one_tenant_never_answers_for_another(conn):
    """The same user's form key, sent again for another tenant, is refused: it does not hand back the
    first tenant's run (looked up across every tenant) as if it were the new tenant's."""
    acme, globex = auth.ensure_tenant(conn, "acme"), auth.ensure_tenant(conn, "globex")
    params = {"date_from": "2026-01-01", "date_to": "2026-01-02"}
    first = reports.request_report(conn, acme["id"], "job_activity", params, audit.Actor("u"), request_key="u:k1")
    again = reports.request_report(conn, acme["id"], "job_activity", params, audit.Actor("u"), request_key="u:k1")
    assert again["id"] == first["id"]
    with pytest.raises(reports.ReportError) as refused:
        reports.request_report(conn, globex["id"], "job_activity", params, audit.Actor("u"), request_key="u:k1")
    assert refused.value.code == "request_key_reused"
    assert conn.execute("SELECT count(*) AS n FROM report_runs WHERE tenant_id = %s",
                        (globex["id"],)).fetchone()["n"] == 0


def test_the_same_requests_work_for_acmes_own_admin(app, client, login_as, db, acme):
    """The control: the requests the tests above send are well-formed, and acme's own admin's change
    acme's rows (so a 403 or 404 above is the tenant check, not a broken request)."""
    login_as("admin", tenant="acme", operator=False)
    tid, t = acme["tenant"], acme["ticket"]
    for path, data, status in (
            ("/jobs/selected/confirm", {"action": "replay", "ids": str(acme["dead"])}, 200),
            ("/jobs/selected", {"action": "run_now", "ids": str(acme["pending"])}, 200),
            (f"/jobs/{acme['dead']}/replay", {}, 200), (f"/jobs/{acme['pending']}/cancel", {}, 200),
            (f"/alerts/{acme['alert']}/ack", {}, 200), (f"/tickets/{t}/act/note", {"body": "x"}, 302),
            (f"/webhooks/{acme['endpoint']}/disable", {}, 200), (f"/api-keys/{acme['key']}/revoke", {}, 200),
            ("/reports/", {"tenant_id": str(tid), "kind": "job_activity", "date_from": "2026-01-01",
                           "date_to": "2026-01-02"}, 303),
            (f"/tenants/{tid}/limits", {"rate": "1", "burst": "1", "max_running": "1"}, 303),
            ("/pauses/pause", {"kind": "tenant", "target": "acme"}, 303)):
        r = _post(client, path, **data)
        assert r.status_code == status, (path, r.status_code, r.get_data(as_text=True)[:300])
    after = _snapshot(db, tid)
    jobs = {j[0]: j for j in after["jobs"]}
    assert jobs[acme["pending"]][1] == "cancelled" and [j for j in jobs.values() if j[4] == acme["dead"]]
    assert after["alerts"][0][1] is not None and after["endpoints"][0][2] is False
    assert after["keys"][0][2] is not None and len(after["runs"]) == 2 and after["tenant"][0][2] == 1
    assert ("tenant", "acme") in [p[:2] for p in after["pauses"]]
    assert len(after["messages"]) > 2  # the note (the ticket opened with its message and a system line)
