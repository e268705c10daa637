"""The end user's notification settings (/inbox/preferences): grid per tenant, quiet hours, audit, isolation."""
from __future__ import annotations

from datetime import time

from opsboard import auth
from tests.conftest import connect

HX = {"HX-Request": "true"}


def _member(app, login_as, tenant="acme-prefs"):
    email = login_as("member", tenant=tenant, operator=False)
    with connect(app.extensions["test_db_url"]) as c:
        user = c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()
        t = auth.ensure_tenant(c, tenant)
    return user["id"], t["id"]


def _prefs(app, user_id, tenant_id):
    with connect(app.extensions["test_db_url"]) as c:
        return {(r["category"], r["channel"]): r["enabled"] for r in c.execute(
            "SELECT category, channel, enabled FROM notification_preferences WHERE user_id = %s AND tenant_id = %s",
            (user_id, tenant_id)).fetchall()}


def test_the_grid_saves_only_what_changed_and_is_audited(app, client, login_as):
    uid, tid = _member(app, login_as)
    with connect(app.extensions["test_db_url"]) as c:   # a tenant default the user has not touched
        c.execute("INSERT INTO notification_preferences (tenant_id, user_id, category, channel, enabled) "
                  "VALUES (%s, NULL, 'system', 'email', false)", (tid,))
    html = client.get("/inbox/").get_data(as_text=True)
    assert 'id="preferences-link"' in html
    html = client.get("/inbox/preferences").get_data(as_text=True)
    assert 'name="pref:ticket:email" value="1" checked' in html
    assert 'name="pref:system:email" value="1" aria-label' in html        # default off, shown unchecked
    # The browser sends every hidden 0 and each checked box's 1 (last wins); ticket/email unchecked now.
    form = {"csrf_token": client.csrf, "tenant": "acme-prefs", "pref:ticket:email": "0",
            "pref:ticket:push": ["0", "1"], "pref:system:email": "0"}
    r = client.post("/inbox/preferences", data=form, headers=HX)
    body = r.get_data(as_text=True)
    assert r.status_code == 200 and 'data-saved="1"' in body and 'name="pref:ticket:email" value="1" aria-label' in body
    assert _prefs(app, uid, tid) == {("ticket", "email"): False}           # push unchanged, system follows the default
    with connect(app.extensions["test_db_url"]) as c:
        (row,) = c.execute("SELECT * FROM audit_log WHERE action = 'user.notification_prefs'").fetchall()
    assert row["after"] == {"ticket.email": False} and row["tenant_id"] == tid and row["target_id"] == str(uid)
    # Without CSRF: refused, nothing saved.
    r = client.post("/inbox/preferences", data={**form, "csrf_token": "", "pref:ticket:email": "1"})
    assert r.status_code in (400, 403)
    assert _prefs(app, uid, tid) == {("ticket", "email"): False}


def test_a_critical_category_is_shown_but_cannot_be_switched_off(app, client, login_as):
    uid, tid = _member(app, login_as)
    html = client.get("/inbox/preferences").get_data(as_text=True)
    assert 'data-category="otp" data-critical="1"' in html and 'name="pref:otp:' not in html
    r = client.post("/inbox/preferences", headers=HX, data={
        "csrf_token": client.csrf, "tenant": "acme-prefs", "pref:ticket:email": "0", "pref:otp:sms": "0"})
    assert r.status_code == 422
    assert 'data-error-code="critical_category"' in r.get_data(as_text=True)
    assert _prefs(app, uid, tid) == {}                                      # nothing saved, not even ticket/email


def test_quiet_hours_save_and_inline_errors(app, client, login_as):
    uid, _ = _member(app, login_as)
    r = client.post("/inbox/preferences/quiet", headers=HX, data={
        "csrf_token": client.csrf, "enabled": ["0", "1"], "time_zone": "Mars/Olympus", "start": "22:00",
        "end": "22:00", "days": ["1", "2"]})
    html = r.get_data(as_text=True)
    assert r.status_code == 422 and 'data-error-for="time_zone"' in html and 'aria-invalid="true"' in html
    assert 'value="Mars/Olympus"' in html                                  # what was typed stays
    r = client.post("/inbox/preferences/quiet", headers=HX, data={
        "csrf_token": client.csrf, "enabled": ["0", "1"], "time_zone": "Asia/Tehran", "start": "22:00",
        "end": "22:00", "days": ["1"]})
    assert r.status_code == 422 and 'data-error-for="window"' in r.get_data(as_text=True)
    r = client.post("/inbox/preferences/quiet", headers=HX, data={
        "csrf_token": client.csrf, "enabled": ["0", "1"], "time_zone": "Asia/Tehran", "start": "9pm",
        "end": "07:00"})
    html = r.get_data(as_text=True)
    assert r.status_code == 422 and 'data-error-for="window"' in html and 'data-error-for="days"' in html
    r = client.post("/inbox/preferences/quiet", headers=HX, data={
        "csrf_token": client.csrf, "enabled": ["0", "1"], "time_zone": "Asia/Tehran", "start": "22:30",
        "end": "07:00", "days": ["5", "6", "9"]})
    assert r.status_code == 200 and 'data-saved="1"' in r.get_data(as_text=True)
    with connect(app.extensions["test_db_url"]) as c:
        q = c.execute("SELECT * FROM quiet_hours WHERE user_id = %s", (uid,)).fetchone()
        audited = c.execute("SELECT after FROM audit_log WHERE action = 'user.quiet_hours'").fetchall()
    assert (q["time_zone"], q["start_time"], q["end_time"], q["days"], q["enabled"]) == \
        ("Asia/Tehran", time(22, 30), time(7, 0), [5, 6], True)
    assert len(audited) == 1 and audited[0]["after"]["days"] == [5, 6]
    html = client.get("/inbox/preferences").get_data(as_text=True)
    assert 'name="start" value="22:30"' in html and 'name="days" value="5" checked' in html


def test_a_tenant_the_user_is_not_in_is_not_found(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        other = auth.ensure_tenant(c, "someone-else")
    uid, tid = _member(app, login_as)
    assert client.get("/inbox/preferences?tenant=someone-else").status_code == 404
    r = client.post("/inbox/preferences", headers=HX, data={
        "csrf_token": client.csrf, "tenant": "someone-else", "pref:ticket:email": "0"})
    assert r.status_code == 404
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM notification_preferences WHERE tenant_id = %s",
                         (other["id"],)).fetchone()["n"] == 0


def test_the_settings_page_speaks_persian(app, client, login_as):
    _member(app, login_as)
    client.post("/locale", data={"locale": "fa", "csrf_token": client.csrf})
    html = client.get("/inbox/preferences").get_data(as_text=True)
    assert 'lang="fa"' in html and "ساعت‌های سکوت" in html and "کدهای یک‌بارمصرف" in html
