"""Issue 43, each person's language: the ways a person's notification locale is set (the account page, the
header's switch while signed in, ``PATCH /api/v1/profile``), the fallback chain (their choice -> their
dashboard's language -> the tenant's default -> fa), alert texts written part by part with left-to-right
islands, the inbox row's link to its object, and the delivery page's correlation id and provider jobs."""
from __future__ import annotations

import re
import uuid

import pytest

from opsboard import alerts, auth, jobqueue
from opsboard.notifications import fanout, inbox, preferences, render
from opsboard.tools import demo
from tests.conftest import connect

ISLAND = re.compile("\u2066[^\u2066\u2069]*\u2069")


def persian_without_latin(text: str) -> bool:
    """No Latin letter outside a left-to-right island: no English run inside the Persian text."""
    return not re.search(r"[A-Za-z]", ISLAND.sub("", text))


def _op(conn):
    return auth.ensure_tenant(conn, f"op-{uuid.uuid4().hex[:8]}", is_operator=True)


def _user(conn, tenant, role="ops", *, profile=None, dashboard=None):
    u = auth.create_user(conn, f"{role}-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", role,
                         tenant["slug"])
    if dashboard:
        auth.set_display_prefs(conn, u["id"], locale=dashboard, calendar=None, time_zone=None)
    if profile:
        preferences.set_locale(conn, u["id"], profile)
    return u["id"]


def _open(conn, tenant, rule="queue_age", key=None, **details):
    key = key or f"q-{uuid.uuid4().hex[:6]}"
    row = alerts.open_alert(conn, rule=rule, key=key, tenant_id=tenant["id"], severity="warning",
                            summary=f"the oldest ready job in {key} has waited 5 min (target 1 min)",
                            details={"queue": key, "oldest_age_seconds": 300, "target_seconds": 60, **details})
    [event] = conn.execute("SELECT * FROM outbox_events WHERE aggregate_id = %s", (str(row["id"]),)).fetchall()
    fanout.fan_out(conn, event["id"])
    return row, event


def _inbox(conn, alert_id):
    return {r["recipient_id"]: r for r in conn.execute(
        "SELECT n.* FROM notifications n JOIN outbox_events e ON e.id = n.event_id WHERE e.aggregate_id = %s",
        (str(alert_id),)).fetchall()}


# ---------------------------------------------------------------- the fallback chain

def test_the_person_then_their_dashboard_then_the_tenant_then_fa(conn):
    op = _op(conn)
    chose_en = _user(conn, op, profile="en")
    dashboard_en = _user(conn, op, dashboard="en")          # never chose: their pages' language
    nothing = _user(conn, op)                               # the tenant's default, then fa
    chose_fa = _user(conn, op, profile="fa", dashboard="en")   # their choice wins over their pages'
    alert, _ = _open(conn, op)
    rows = _inbox(conn, alert["id"])
    assert {u: rows[u]["locale"] for u in (chose_en, dashboard_en, nothing, chose_fa)} == {
        chose_en: "en", dashboard_en: "en", nothing: "fa", chose_fa: "fa"}
    assert rows[chose_en]["title"].startswith("Warning alert: queue_age")
    assert rows[nothing]["title"].startswith("هشدار: انتظار طولانی در صف")
    # Each channel's delivery is written in the same language (the fan-out's statement reads the chain too).
    delivered = {(r["recipient_id"], r["channel"]): r["locale"] for r in conn.execute(
        "SELECT recipient_id, channel, locale FROM deliveries d JOIN outbox_events e ON e.id = d.event_id "
        "WHERE e.aggregate_id = %s", (str(alert["id"]),)).fetchall()}
    assert {u: delivered[(u, "email")] for u in (chose_en, dashboard_en, nothing, chose_fa)} == {
        chose_en: "en", dashboard_en: "en", nothing: "fa", chose_fa: "fa"}

    conn.execute("INSERT INTO notification_tenant_settings (tenant_id, default_locale) VALUES (%s, 'en')", (op["id"],))
    alert, _ = _open(conn, op)
    rows = _inbox(conn, alert["id"])
    assert {u: rows[u]["locale"] for u in (chose_en, dashboard_en, nothing, chose_fa)} == {
        chose_en: "en", dashboard_en: "en", nothing: "en", chose_fa: "fa"}
    # The deliveries carry the same locale (the deliver job renders each channel in it).
    locales = {(r["recipient_id"], r["channel"]): r["locale"] for r in conn.execute(
        "SELECT recipient_id, channel, locale FROM deliveries d JOIN outbox_events e ON e.id = d.event_id "
        "WHERE e.aggregate_id = %s", (str(alert["id"]),)).fetchall()}
    assert locales[(chose_fa, "email")] == "fa" and locales[(nothing, "email")] == "en"
    # What the profile reports is the first link of the same chain.
    assert preferences.notification_locale(conn, nothing, op["id"]) == {"locale": None, "effective_locale": "en"}
    assert preferences.notification_locale(conn, dashboard_en, op["id"]) == {"locale": None,
                                                                             "effective_locale": "en"}
    assert preferences.notification_locale(conn, chose_fa, op["id"]) == {"locale": "fa", "effective_locale": "fa"}


def test_an_unknown_notification_language_is_refused(conn):
    uid = _user(conn, _op(conn))
    with pytest.raises(Exception) as caught:
        preferences.set_locale(conn, uid, "de")
    assert getattr(caught.value, "code", None) == "bad_locale"


# ---------------------------------------------------------------- alert texts, part by part

@pytest.mark.parametrize("rule, key, details", [
    ("dead_rising", "all", {"dead": 14, "window_seconds": 600, "threshold": 10}),
    ("error_code", "http_503", {"error_code": "http_503", "jobs": 25, "window_seconds": 600, "threshold": 20}),
    ("queue_age", "default", {"queue": "default", "oldest_age_seconds": 300, "target_seconds": 60}),
    ("no_worker", "default", {"queue": "default", "silence_seconds": 60, "oldest_age_seconds": 30}),
])
def test_a_persian_alert_has_no_english_run_and_keeps_its_ids_as_islands(conn, rule, key, details):
    op = _op(conn)
    fa, en = _user(conn, op, profile="fa"), _user(conn, op, profile="en")
    row = alerts.open_alert(conn, rule=rule, key=key, tenant_id=op["id"], severity="warning",
                            summary="an English summary", details=details)
    [event] = conn.execute("SELECT * FROM outbox_events WHERE aggregate_id = %s", (str(row["id"]),)).fetchall()
    fanout.fan_out(conn, event["id"])
    rows = _inbox(conn, row["id"])
    note = rows[fa]
    assert note["locale"] == "fa"
    for text in (note["title"], note["body"]):
        assert persian_without_latin(text), text
    assert "an English summary" not in note["body"]
    assert f"\u2066/alerts/{row['id']}\u2069" in note["body"]          # the path, an island
    if rule in ("error_code", "queue_age", "no_worker"):
        assert f"\u2066{key}\u2069" in note["body"]                    # the code or the queue, an island
    if rule == "dead_rising":
        assert "\u2066۱۴\u2069" in note["body"] and "۱۰ دقیقه" in note["body"]
    assert rows[en]["body"].startswith("an English summary")         # English readers: the stored text
    # The Persian email writes the islands as <bdi dir="ltr"> and its text part as isolates.
    found = fanout.render_layers(fanout.templates.layers(conn, "alert.opened", op["id"]), "email", ["fa"],
                                 fanout.variables_for(conn, fanout.policymod.policy_for("alert.opened"),
                                                      event, fa))
    subject, body = found[0], found[1]
    assert f'<bdi dir="ltr">/alerts/{row["id"]}</bdi>' not in body   # the link itself is an href, not text
    assert f'href="/alerts/{row["id"]}"' in body
    if rule != "dead_rising":
        assert f'<bdi dir="ltr">{key}</bdi>' in body
    assert persian_without_latin(render.email_text(subject))
    text = render.email_text(body)
    assert persian_without_latin(text.replace(f"/alerts/{row['id']}", "")), text


# ---------------------------------------------------------------- links

def test_every_inbox_row_about_an_object_links_to_it(conn):
    op = _op(conn)
    uid = _user(conn, op, profile="en")
    alert, _ = _open(conn, op)
    note = _inbox(conn, alert["id"])[uid]
    assert note["data"]["link"] == f"/alerts/{alert['id']}"
    # From the aggregate when the policy gives no link; never an address off the site.
    assert render.object_link({}, "job:0190") == "/jobs/0190"
    assert render.object_link({"link": "//evil.example/x"}, "ticket:7") == "/tickets/7"
    assert render.object_link({"link": "javascript:alert(1)"}, "order:1") is None
    assert render.absolute_url("https://ops.example.com/", "/alerts/1") == "https://ops.example.com/alerts/1"
    assert render.absolute_links('<a href="/a">x</a><a href="//b">y</a><img src="/c">', "https://o.test") == (
        '<a href="https://o.test/a">x</a><a href="//b">y</a><img src="https://o.test/c">')


def test_the_web_inbox_shows_the_link(app, client, login_as):
    email = login_as("ops")
    with connect(app.extensions["test_db_url"]) as c:
        user = c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()
        op = c.execute("SELECT t.* FROM tenants t JOIN memberships m ON m.tenant_id = t.id "
                       "WHERE m.user_id = %s", (user["id"],)).fetchone()
        alert, _ = _open(c, op)
    html = client.get("/inbox/").get_data(as_text=True)
    assert f'class="inbox-open" href="/alerts/{alert["id"]}"' in html
    assert 'data-open-label="' in html


# ---------------------------------------------------------------- setting it: account page, switch, API

def _profile_locale(app, email):
    with connect(app.extensions["test_db_url"]) as c:
        row = c.execute("SELECT p.locale FROM users u LEFT JOIN notification_profiles p ON p.user_id = u.id "
                        "WHERE u.email = %s", (email,)).fetchone()
        audit = c.execute("SELECT a.* FROM audit_log a JOIN users u ON u.id::text = a.target_id "
                          "WHERE u.email = %s AND a.action = 'user.notification_locale' ORDER BY a.id",
                          (email,)).fetchall()
    return row["locale"], audit


def test_the_account_page_sets_the_notification_language(app, client, login_as):
    email = login_as("ops")
    html = client.get("/account").get_data(as_text=True)
    assert 'name="notification_locale"' in html and 'id="notification-language"' in html
    r = client.post("/account/notification-language", data={"csrf_token": client.csrf, "notification_locale": "en"})
    assert r.status_code == 303
    locale, audit = _profile_locale(app, email)
    assert locale == "en" and audit[-1]["after"] == {"locale": "en"} and audit[-1]["before"] == {"locale": None}
    assert "Notification language saved." in client.get("/account").get_data(as_text=True)
    r = client.post("/account/notification-language", data={"csrf_token": client.csrf, "notification_locale": "de"})
    assert r.status_code == 400 and _profile_locale(app, email)[0] == "en"
    r = client.post("/account/notification-language", data={"notification_locale": "fa"})   # no CSRF token
    assert 400 <= r.status_code < 500 and _profile_locale(app, email)[0] == "en"
    r = client.post("/account/notification-language", data={"csrf_token": client.csrf, "notification_locale": ""})
    assert r.status_code == 303 and _profile_locale(app, email)[0] is None


def test_the_language_switch_while_signed_in_sets_it(app, client, login_as):
    email = login_as("ops")
    assert client.post("/locale", data={"locale": "en", "csrf_token": client.csrf, "next": "/"}).status_code == 302
    assert _profile_locale(app, email)[0] == "en"
    assert client.post("/locale", data={"locale": "fa", "csrf_token": client.csrf, "next": "/"}).status_code == 302
    assert _profile_locale(app, email)[0] == "fa"


def test_the_api_profile_sets_and_validates_the_locale(app, client):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, f"t-{uuid.uuid4().hex[:6]}")
        u = auth.create_user(c, f"m-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", "member",
                             t["slug"])
        token, _ = inbox.create_token(c, u["id"])
    h = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/v1/profile", headers=h).get_json() == {"locale": None, "effective_locale": "fa"}
    r = client.patch("/api/v1/profile", json={"locale": "en"}, headers=h)
    assert r.status_code == 200 and r.get_json() == {"locale": "en", "effective_locale": "en"}
    for body, code in (({"locale": "de"}, "invalid_locale"), ({"locale": 5}, "invalid_field"),
                       ({"lang": "en"}, "unknown_field"), ({}, "missing_field"), ({"locale": ""}, "invalid_field")):
        r = client.patch("/api/v1/profile", json=body, headers=h)
        assert r.status_code == 400 and r.get_json()["error"] == code, (body, r.get_json())
    assert client.patch("/api/v1/profile", data="x", headers=h).status_code == 400
    assert client.patch("/api/v1/profile", json={"locale": "en"}).status_code == 401
    assert client.get("/api/v1/profile", headers=h).get_json()["locale"] == "en"
    r = client.patch("/api/v1/profile", json={"locale": None}, headers=h)
    assert r.get_json() == {"locale": None, "effective_locale": "fa"}
    with connect(app.extensions["test_db_url"]) as c:
        audit = c.execute("SELECT before, after, tenant_id FROM audit_log WHERE action = 'user.notification_locale' "
                          "AND target_id = %s ORDER BY id", (str(u["id"]),)).fetchall()
    assert [(a["before"], a["after"]) for a in audit] == [({"locale": None}, {"locale": "en"}),
                                                         ({"locale": "en"}, {"locale": None})]
    assert all(a["tenant_id"] == t["id"] for a in audit)
    doc = client.get("/api/v1/openapi.json").get_json()
    assert doc["paths"]["/profile"]["patch"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProfileUpdate"}
    assert doc["components"]["schemas"]["ProfileUpdate"]["properties"]["locale"]["enum"] == ["fa", "en", None]


# ---------------------------------------------------------------- the demo

def test_the_demo_english_users_get_english_notifications(app, conn):
    url = app.extensions["test_db_url"]
    demo.seed(url, {"users": {email: "demo password 1" for email, _, _ in demo.USERS}})
    with connect(url) as c:
        locales = {r["email"]: r["locale"] for r in c.execute(
            "SELECT u.email, p.locale FROM users u JOIN notification_profiles p ON p.user_id = u.id "
            "WHERE u.email LIKE '%%.demo'").fetchall()}
        assert locales["ops@opsboard.demo"] == locales["support@opsboard.demo"] == "en"
        assert locales["ops@acme.demo"] == locales["user@acme.demo"] == "en"
        assert locales["support-fa@opsboard.demo"] == "fa"
        operator = c.execute("SELECT * FROM tenants WHERE slug = 'operator'").fetchone()
        alert, _ = _open(c, operator)
        ops = c.execute("SELECT id FROM users WHERE email = 'ops@opsboard.demo'").fetchone()["id"]
        assert _inbox(c, alert["id"])[ops]["locale"] == "en"


# ---------------------------------------------------------------- the delivery page

def test_the_delivery_page_shows_the_correlation_id_and_the_provider_jobs(app, client, login_as):
    email = login_as("admin")
    with connect(app.extensions["test_db_url"]) as c:
        op = c.execute("SELECT t.* FROM tenants t JOIN memberships m ON m.tenant_id = t.id JOIN users u "
                       "ON u.id = m.user_id WHERE u.email = %s", (email,)).fetchone()
        alert, event = _open(c, op)
        d = c.execute("SELECT * FROM deliveries WHERE event_id = %s AND channel = 'email'", (event["id"],)).fetchone()
        c.execute("UPDATE jobs SET correlation_id = 'req-4711' WHERE id = %s", (d["job_id"],))
        provider = jobqueue.enqueue(c, "email.send", {"message_id": str(uuid.uuid4())}, tenant=op["id"],
                                    idempotency_key=f"delivery:{d['id']}", correlation_id="req-4711",
                                    event_id=event["id"])
    html = client.get(f"/notifications/?event_id={event['id']}").get_data(as_text=True)
    assert '<a href="/jobs/?correlation_id=req-4711"' in html
    assert f'href="/jobs/{provider["id"]}" data-job-type="email.send"' in html


# ---------------------------------------------------------------- the tenant's default

def test_a_tenants_admin_sets_its_default_notification_language(app, client, login_as):
    email = login_as("admin", tenant=f"t-{uuid.uuid4().hex[:6]}", operator=False)
    with connect(app.extensions["test_db_url"]) as c:
        own = c.execute("SELECT t.* FROM tenants t JOIN memberships m ON m.tenant_id = t.id JOIN users u "
                        "ON u.id = m.user_id WHERE u.email = %s", (email,)).fetchone()
        other = auth.ensure_tenant(c, f"o-{uuid.uuid4().hex[:6]}")
        member_id = _user(c, own, role="member")
    page = client.get(f"/tenants/{own['id']}").get_data(as_text=True)
    assert 'name="default_locale"' in page
    post = lambda tid, locale, **kw: client.post(f"/tenants/{tid}/notification-language",  # noqa: E731
                                                 data={"csrf_token": client.csrf, "default_locale": locale, **kw})
    assert post(own["id"], "en").status_code == 303
    assert post(own["id"], "de").status_code == 400
    assert post(other["id"], "en").status_code in (403, 404)         # another tenant's: never
    assert client.post(f"/tenants/{own['id']}/notification-language", data={"default_locale": "fa"}).status_code \
        in (400, 403)                                                   # no CSRF token
    with connect(app.extensions["test_db_url"]) as c:
        settings = {r["tenant_id"]: r["default_locale"] for r in
                    c.execute("SELECT * FROM notification_tenant_settings").fetchall()}
        assert settings.get(own["id"]) == "en" and other["id"] not in settings
        [row] = c.execute("SELECT * FROM audit_log WHERE action = 'tenant.notification_locale' AND tenant_id = %s",
                          (own["id"],)).fetchall()
        assert (row["before"], row["after"]) == ({"default_locale": "fa"}, {"default_locale": "en"})
        assert preferences.notification_locale(c, member_id, own["id"])["effective_locale"] == "en"


def test_ops_staff_cannot_set_a_tenants_default_language(app, client, login_as):
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    login_as("ops", tenant=tenant, operator=False)
    with connect(app.extensions["test_db_url"]) as c:
        tid = c.execute("SELECT id FROM tenants WHERE slug = %s", (tenant,)).fetchone()["id"]
    assert 'name="default_locale"' not in client.get(f"/tenants/{tid}").get_data(as_text=True)
    r = client.post(f"/tenants/{tid}/notification-language", data={"csrf_token": client.csrf, "default_locale": "en"})
    assert r.status_code == 403
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT 1 FROM notification_tenant_settings WHERE tenant_id = %s", (tid,)).fetchone() is None


# ---------------------------------------------------------------- upgraded installations

def test_a_changed_shipped_text_reaches_a_triple_only_the_product_published(conn):
    """An installation seeded by an earlier release gets the new shipped words (the alert texts of issue 43)
    as the next version; a triple an author touched keeps the author's."""
    from opsboard.catalogue import ShippedTemplate
    from opsboard.notifications import templates
    key = f"lang_test.{uuid.uuid4().hex[:6]}"
    old = {(key, "inbox", "fa"): ShippedTemplate(key, "inbox", "fa", "قدیم", "{{ summary }} قدیم", "summary", None),
           (key, "inbox", "en"): ShippedTemplate(key, "inbox", "en", "Old", "{{ summary }} old", "summary", None)}
    new = {(key, "inbox", "fa"): ShippedTemplate(key, "inbox", "fa", "نو", "{{ queue|ltr }} نو", "queue", None),
           (key, "inbox", "en"): ShippedTemplate(key, "inbox", "en", "New", "{{ queue }} new", "queue", None)}
    assert len(templates.seed_shipped(conn, old)) == 2
    templates.save_draft(conn, audit_actor(), key, "inbox", "en", subject="Mine", body="mine", variables="")
    made = templates.seed_shipped(conn, new)
    assert [(r["locale"], r["version"], r["subject"], r["author_label"]) for r in made] == [("fa", 2, "نو", "seed")]
    assert templates.seed_shipped(conn, new) == []                    # the words are current: nothing more
    en = [v for v in templates.versions(conn, key) if v["locale"] == "en"]
    assert sorted((v["version"], v["status"], v["subject"]) for v in en) == [(1, "published", "Old"),
                                                                             (2, "draft", "Mine")]


def audit_actor():
    from opsboard.audit import Actor
    return Actor(label="author@example.test")
