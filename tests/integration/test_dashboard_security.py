"""The dashboard under hostile input: every GET route with junk arguments,
NUL characters, out-of-range dates, url_for options smuggled in as query
arguments, non-ASCII secrets, reused request keys, another tenant's ids.

Whatever comes in, the answer is a 4xx with a JSON error code (for JSON
clients), never a 500, never another tenant's data.
"""
from __future__ import annotations

import re
import uuid

import pytest

from opsboard import audit, auth, metrics
from opsboard.db import Database
from tests.conftest import connect, csrf_from, make_config
from tests.support import dashboard as seed

JSON = {"Accept": "application/json"}
HX = {"HX-Request": "true"}


@pytest.fixture
def db(app):
    c = connect(app.extensions["test_db_url"])
    yield c
    c.close()


def _post(client, url, headers=JSON, **data):
    data.setdefault("csrf_token", client.csrf)
    data.setdefault("request_key", str(uuid.uuid4()))
    data.setdefault("reason", "checked the provider")
    return client.post(url, data=data, headers=headers)


def _audit(db, action: str) -> list[dict]:
    return db.execute("SELECT * FROM audit_log WHERE action = %s ORDER BY at, id", (action,)).fetchall()


# ---------------------------------------------------------------- fuzz every GET route

#: Every query argument any dashboard page reads, and url_for's own options.
FUZZ_PARAMS = ("queue", "type", "tenant_id", "status", "error_code", "correlation_id", "event_id", "since",
               "until", "q", "before", "after", "actor", "action", "target_type", "target_id", "show", "next",
               "_scheme", "_external", "_method", "_anchor")
FUZZ_VALUES = ("\x00", "a\x00b", "x" * 1000, "0001-01-01", "9999-12-31", "9999-12-31T23:59:59", "2026-13-45",
               "é' OR 1=1 --", "-1", "2026-01-01T00:00:00_not-a-uuid", "javascript:alert(1)")


def test_every_get_route_answers_junk_arguments_below_500(app, client, login_as, db):
    t = seed.tenant(db, "acme")
    [job] = seed.jobs(db, t, 1)
    seed.kill(db, [job])
    login_as("ops")
    from opsboard import reports
    run = reports.request_report(db, t, "job_activity", {"date_from": "2026-01-01", "date_to": "2026-01-02"},
                                 audit.Actor("t"))
    ids = {"job_id": str(job), "alert_id": str(uuid.uuid4()), "tenant_id": str(t), "run_id": str(run["id"]),
           "endpoint_id": str(uuid.uuid4()),
           "ticket_id": str(uuid.uuid4()), "attachment_id": str(uuid.uuid4())}
    paths = []
    for rule in app.url_map.iter_rules():
        if "GET" in rule.methods and rule.endpoint != "static":
            paths.append(re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids.get(m.group(1), str(uuid.uuid4())), rule.rule))
    assert "/jobs/_rows" in paths and "/audit/_rows" in paths and f"/jobs/{job}/payload" in paths
    failures = []
    for path in paths:
        for name in FUZZ_PARAMS:
            for value in FUZZ_VALUES:
                r = client.get(path, query_string={name: value}, headers=JSON)
                if r.status_code >= 500:
                    failures.append((path, name, value[:30], r.status_code))
                elif r.status_code == 400 and not (r.is_json and r.json.get("error")):
                    failures.append((path, name, value[:30], "400 without a JSON error code"))
                pushed = r.headers.get("HX-Push-Url", "") + r.headers.get("Location", "")
                if pushed and not pushed.startswith("/"):
                    failures.append((path, name, value[:30], f"leaves the site: {pushed}"))
    assert failures == []


@pytest.mark.parametrize("path", ["/jobs/?type=a%00b", "/jobs/?q=abc%00", "/jobs/?correlation_id=%00",
                                  "/jobs/replay-many/confirm?error_code=%00", "/audit/?actor=%00",
                                  "/audit/?target_id=x%00"])
def test_nul_in_a_query_argument_is_a_400(client, login_as, path):
    login_as("ops")
    r = client.get(path, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_input"


@pytest.mark.parametrize("path", ["/jobs/?since=0001-01-01", "/jobs/?until=9999-12-31T23:59:59",
                                  "/jobs/_rows?since=1969-12-31", "/audit/?until=9999-12-31",
                                  "/audit/?since=0001-01-01"])
def test_dates_out_of_range_are_400_not_an_overflow(client, login_as, path):
    login_as("ops")
    r = client.get(path, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_date"


def test_audit_filters_have_a_length_limit(client, login_as):
    login_as("ops")
    r = client.get("/audit/", query_string={"actor": "x" * 201}, headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_filter"


# ---------------------------------------------------------------- url_for options as query arguments

SMUGGLED = {"_external": "1", "_scheme": "javascript", "_anchor": "x", "_method": "POST"}


def test_job_list_links_carry_only_filter_arguments(client, login_as, db):
    t = seed.tenant(db, "acme")
    seed.jobs(db, t, 51)
    login_as("ops")
    r = client.get("/jobs/", query_string={**SMUGGLED, "status": "pending", "evil": "1"})
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    [older] = re.findall(r'href="([^"]*)">Older jobs', html)
    assert older.startswith("/jobs/?") and "status=pending" in older
    assert "javascript" not in older and "evil" not in older and "#" not in older
    part = client.get("/jobs/_rows", query_string={**SMUGGLED, "status": "pending"}, headers=HX)
    assert part.status_code == 200
    assert part.headers["HX-Push-Url"] == "/jobs/?status=pending"


def test_audit_pager_carries_only_filter_arguments(client, login_as, db):
    for i in range(51):
        audit.record(db, audit.Actor("cli"), "test.noise", target_type="job", target_id=str(uuid.uuid4()))
    login_as("ops")
    r = client.get("/audit/", query_string={**SMUGGLED, "action": "test.noise"})
    assert r.status_code == 200
    [older] = re.findall(r'href="([^"]*)">Older records', r.get_data(as_text=True))
    assert older.startswith("/audit/?") and "action=test.noise" in older and "after=" in older
    assert "javascript" not in older and "_method" not in older and "#" not in older


def test_dead_letter_push_url_carries_only_filter_arguments(client, login_as):
    login_as("ops")
    r = client.get("/dead/_groups", query_string={**SMUGGLED, "queue": "default"}, headers=HX)
    assert r.status_code == 200 and r.headers["HX-Push-Url"] == "/dead/?queue=default"


# ---------------------------------------------------------------- form fields

@pytest.mark.parametrize("field", ["reason", "type", "error_code"])
def test_nul_in_a_form_field_is_a_400_and_nothing_happens(client, login_as, db, field):
    t = seed.tenant(db, "acme")
    [job] = seed.jobs(db, t, 1)
    seed.kill(db, [job])
    login_as("ops")
    url = f"/jobs/{job}/replay" if field == "reason" else "/jobs/replay-many"
    r = _post(client, url, **{field: "a\x00b"})
    assert r.status_code == 400 and r.json["error"] == "invalid_input"
    assert _audit(db, "job.replay") == [] and _audit(db, "job.replay_many") == []


def test_nul_in_the_login_form_is_a_400(client):
    token = csrf_from(client)
    r = client.post("/login", data={"email": "a\x00@example.test", "password": "x", "csrf_token": token},
                    headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_input"


@pytest.mark.parametrize("reason", ["\u200b", "\u200f\u200e", " \u00a0\u2003 ", "\ufeff"])
def test_a_reason_of_invisible_characters_is_no_reason(client, login_as, db, reason):
    t = seed.tenant(db, "acme")
    [job] = seed.jobs(db, t, 1)
    seed.kill(db, [job])
    login_as("ops")
    r = _post(client, f"/jobs/{job}/replay", reason=reason)
    assert r.status_code == 400 and r.json["error"] == "reason_required"
    # Persian keeps its zero-width non-joiner inside words.
    r = _post(client, f"/jobs/{job}/replay", reason="می‌خواهیم دوباره بفرستیم")
    assert r.status_code == 200
    assert _audit(db, "job.replay")[0]["reason"] == "می‌خواهیم دوباره بفرستیم"


# ---------------------------------------------------------------- secrets compared safely

def test_csrf_token_with_non_ascii_characters_is_refused_not_a_500(client, login_as):
    login_as("ops")
    for kwargs in ({"data": {"csrf_token": "é"}}, {"headers": {"X-CSRFToken": "توکن"}}):
        r = client.post("/logout", **kwargs)
        assert r.status_code == 400, kwargs


@pytest.fixture
def token_app(db_url):
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=2).open()
    app = create_app({"OPSBOARD": make_config(database_url=db_url, metrics_token="s3cret-token"),
                      "DATABASE": database, "TESTING": True})
    yield app
    database.close()


def test_metrics_bearer_with_non_ascii_characters_is_401_not_a_500(token_app):
    client = token_app.test_client()
    r = client.get("/metrics", headers={**JSON, "Authorization": "Bearer s3cret-tokén"})
    assert r.status_code == 401 and r.json["error"] == "metrics_forbidden"
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_request_id_must_be_ascii(client):
    r = client.get("/healthz", headers={"X-Request-Id": "abcé"})
    assert r.headers["X-Request-Id"] != "abcé" and len(r.headers["X-Request-Id"]) == 32


# ---------------------------------------------------------------- request keys and audit rows

def test_resolve_refuses_a_request_key_used_for_another_job(client, login_as, db):
    t = seed.tenant(db, "acme")
    first, second = seed.jobs(db, t, 2)
    seed.kill(db, [first, second])
    login_as("ops")
    key = str(uuid.uuid4())
    assert _post(client, f"/jobs/{first}/resolve", request_key=key).status_code == 200
    assert _post(client, f"/jobs/{first}/resolve", request_key=key).status_code == 200  # a double submit
    r = _post(client, f"/jobs/{second}/resolve", request_key=key)
    assert r.status_code == 409 and r.json["error"] == "request_key_reused"
    assert db.execute("SELECT count(*) AS n FROM job_resolutions").fetchone()["n"] == 1


def test_acknowledge_refuses_a_request_key_used_for_another_alert(client, login_as, db):
    ids = [uuid.uuid4(), uuid.uuid4()]
    for i, aid in enumerate(ids):
        db.execute("""INSERT INTO alerts (id, rule, key, severity, summary, opened_at, last_seen_at)
                      VALUES (%s, 'no_worker', %s, 'critical', 'no worker', now(), now())""", (aid, f"q{i}"))
    login_as("ops")
    key = str(uuid.uuid4())
    assert _post(client, f"/alerts/{ids[0]}/ack", request_key=key).status_code == 200
    r = _post(client, f"/alerts/{ids[1]}/ack", request_key=key)
    assert r.status_code == 409 and r.json["error"] == "request_key_reused"
    assert db.execute("SELECT acknowledged_at FROM alerts WHERE id = %s", (ids[1],)).fetchone()["acknowledged_at"] is None


def test_bulk_replay_summary_belongs_to_the_tenant_and_its_staff_see_it(client, login_as, db):
    acme = seed.tenant(db, "acme")
    jobs = seed.jobs(db, acme, 2)
    seed.kill(db, jobs, "http_410")
    login_as("ops", tenant="acme", operator=False)
    r = _post(client, "/jobs/replay-many", type="diag.noop", error_code="http_410")
    assert r.status_code == 200
    [summary] = _audit(db, "job.replay_many")
    assert summary["tenant_id"] == acme and summary["reason"] == "checked the provider"
    page = client.get("/audit/", query_string={"action": "job.replay_many"}).get_data(as_text=True)
    assert f'data-audit-id="{summary["id"]}"' in page


# ---------------------------------------------------------------- another tenant's ids

def test_tenant_scoped_ops_never_reach_another_tenants_rows(client, login_as, db):
    acme, beta = seed.tenant(db, "acme"), seed.tenant(db, "beta")
    seed.jobs(db, acme, 1)
    dead, running, pending = seed.jobs(db, beta, 3, payload={"note": "beta-secret-note"})
    seed.kill(db, [dead])
    seed.worker(db, "w-beta", {"default": 2})
    seed.run(db, [running], "w-beta")
    alert = uuid.uuid4()
    db.execute("""INSERT INTO alerts (id, rule, key, tenant_id, severity, summary, opened_at, last_seen_at)
                  VALUES (%s, 'x', 'k', %s, 'warning', 'beta-alert-summary', now(), now())""", (alert, beta))
    audit.record(db, audit.Actor("cli"), "job.cancel", target_type="job", target_id=pending, tenant_id=beta,
                 reason="beta-audit-reason")
    metrics.sample_depth(db)
    login_as("ops", tenant="acme", operator=False)
    secrets = [str(dead), str(running), str(pending), str(alert), str(beta), "beta-secret-note",
               "beta-alert-summary", "beta-audit-reason"]
    for path in (f"/jobs/{dead}", f"/jobs/{dead}/payload", f"/alerts/{alert}", f"/tenants/{beta}"):
        r = client.get(path, headers=JSON)
        assert r.status_code == 404, path
        assert not [s for s in secrets if s in r.get_data(as_text=True)], path
    for path in (f"/jobs/?tenant_id={beta}", f"/jobs/?event_id={uuid.uuid4()}", f"/dead/?tenant_id={beta}",
                 f"/audit/?target_id={pending}", "/audit/", "/jobs/", "/dead/", "/alerts/",
                 "/tenants/", "/queues/", "/alerts/_banner"):
        r = client.get(path)
        assert r.status_code == 200, path
        leaked = [s for s in secrets if s in r.get_data(as_text=True)]
        assert leaked == [], (path, leaked)
    confirm = client.get(f"/jobs/replay-many/confirm?tenant_id={beta}").get_data(as_text=True)
    assert 'data-count="0"' in confirm and "Nothing to replay" in confirm  # the filter echoed, nothing counted
    for path in (f"/jobs/{dead}/replay", f"/jobs/{dead}/resolve", f"/jobs/{pending}/cancel", f"/alerts/{alert}/ack"):
        r = _post(client, path)
        assert r.status_code == 404 and r.json["error"] == "not_found", path
    r = _post(client, "/jobs/replay-many", tenant_id=str(beta))
    assert r.status_code == 200 and 'data-replayed="0"' in r.get_data(as_text=True)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s", (beta,)).fetchone()["n"] == 3
    assert db.execute("SELECT count(*) AS n FROM audit_log WHERE tenant_id = %s", (beta,)).fetchone()["n"] == 1


# ---------------------------------------------------------------- pages, headers, templates

def test_tenant_page_links_to_that_tenants_jobs(client, login_as, db):
    acme = seed.tenant(db, "acme")
    seed.jobs(db, acme, 2)
    metrics.sample_depth(db)
    login_as("ops")
    html = client.get(f"/tenants/{acme}").get_data(as_text=True)
    links = re.findall(r'href="(/jobs/\?[^"]*)"', html)
    assert links and all(f"tenant_id={acme}" in link for link in links)


def test_signed_out_json_and_htmx_clients_get_401(client):
    r = client.get("/jobs/_rows", headers=HX)
    assert r.status_code == 401 and r.headers["HX-Redirect"] == "/login"
    assert "<html" not in r.get_data(as_text=True)
    r = client.get("/audit/", headers=JSON)
    assert r.status_code == 401 and r.json["error"] == "unauthorized"
    r = client.get("/audit/")  # a browser still goes to the sign-in page
    assert r.status_code == 302 and r.headers["Location"].startswith("/login?next=")


def test_pages_are_not_stored_and_the_csp_closes_base_and_object(client, login_as):
    login_as("ops")
    r = client.get("/jobs/")
    assert r.headers["Cache-Control"] == "no-store"
    csp = r.headers["Content-Security-Policy"]
    assert "base-uri 'none'" in csp and "object-src 'none'" in csp and "'unsafe-eval'" not in csp
    html = r.get_data(as_text=True)
    assert '"allowEval": false' in html and '"historyCacheSize": 0' in html and '"allowScriptTags": false' in html
    assert "<script>" not in html and "|safe" not in html
    static = client.get("/static/css/opsboard.css")
    assert static.headers.get("Cache-Control") != "no-store"
    static.close()


def test_home_page_marks_user_text_direction(client, login_as, db):
    # Every role now lands on its own page (queues, tickets, templates, inbox);
    # the tenant's own page shows its Persian name isolated from the LTR page.
    login_as("ops", tenant="persian-co", operator=False)
    db.execute("UPDATE tenants SET name = 'شرکت نمونه' WHERE slug = 'persian-co'")
    tid = db.execute("SELECT id FROM tenants WHERE slug = 'persian-co'").fetchone()["id"]
    html = client.get(f"/tenants/{tid}").get_data(as_text=True)
    assert '<h1><bdi>شرکت نمونه</bdi>' in html


def test_workers_page_is_for_platform_staff_only(app, client, login_as):
    login_as("ops", tenant="acme-only", operator=False)
    r = client.get("/workers/", headers={"Accept": "application/json"})
    assert r.status_code == 403 and r.json["error"] == "platform_staff_only"
    assert client.get("/workers/_list").status_code == 403


def test_running_share_counts_only_tenants_in_scope(app, client, login_as):
    from opsboard import jobqueue, metrics
    from opsboard.auth import TenantScope
    from tests.conftest import connect
    with connect(app.extensions["test_db_url"]) as c:
        mine = auth.ensure_tenant(c, "mine")["id"]
        other = auth.ensure_tenant(c, "other")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for t in (mine, other, other, other)])
        jobqueue.claim_batch(c, "default", "w", 10, 30)
        metrics.sample_depth(c)
        rows = metrics.tenant_backlog(c, TenantScope(all=False, ids=(mine,)))
        assert [r.slug for r in rows] == ["mine"] and rows[0].running_share == 1.0
        everyone = {r.slug: r.running_share for r in metrics.tenant_backlog(c, TenantScope(all=True))}
        assert everyone == {"mine": 0.25, "other": 0.75}
