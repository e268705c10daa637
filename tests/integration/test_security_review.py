"""The outside review's security findings (issue 15), one test or more each:
sessions end server-side, the login throttle holds under concurrency, HEAD
never signs in, denied actions are audited, operator staff stay anonymous to
tenants, the Host header is checked, the CSP has no inline styles."""
from __future__ import annotations

import threading
import uuid

import pytest

from opsboard import auth
from opsboard.db import Database
from tests.conftest import connect, csrf_from, make_config
from tests.integration.test_auth_web import PASSWORD, add_user, sign_in
from tests.support import dashboard as seed

JSON = {"Accept": "application/json"}


@pytest.fixture
def db(app):
    return app.extensions["test_db_url"]


def _copy_cookie(app, client):
    """A second browser holding a copy of ``client``'s session cookie."""
    cookie = client.get_cookie("opsboard_session")
    assert cookie is not None
    thief = app.test_client()
    thief.set_cookie("opsboard_session", cookie.value)
    return thief


def _csrf(client) -> str:
    return csrf_from(client, "/account")


# ---------------------------------------------------------------- 1. sessions end server-side

def test_copied_cookie_stops_working_after_logout(app, client, db):
    email = add_user(db, "ops")
    assert sign_in(client, email).status_code == 302
    assert client.get("/audit/").status_code == 200
    token = _csrf(client)
    thief = _copy_cookie(app, client)
    assert thief.get("/audit/").status_code == 200  # the copy works while the session lives

    r = client.post("/logout", data={"csrf_token": token})
    assert r.status_code == 302

    assert thief.get("/audit/").status_code == 302  # back to the sign-in page
    r = thief.post("/alerts/00000000-0000-0000-0000-000000000000/ack", data={"csrf_token": token, "reason": "x"},
                   headers=JSON)
    assert r.status_code == 401


def test_other_sessions_survive_a_logout_of_one(app, db):
    email = add_user(db, "ops")
    a, b = app.test_client(), app.test_client()
    sign_in(a, email)
    sign_in(b, email)
    a.post("/logout", data={"csrf_token": _csrf(a)})
    assert b.get("/audit/").status_code == 200


def test_password_change_ends_every_session(app, client, db):
    email = add_user(db, "ops")
    sign_in(client, email)
    thief = _copy_cookie(app, client)
    with connect(db) as c:
        uid = c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()["id"]
        auth.set_password(c, uid, "a brand new password")
    assert client.get("/audit/").status_code == 302
    assert thief.get("/audit/").status_code == 302


def test_deactivation_ends_every_session(app, client, db):
    email = add_user(db, "ops")
    sign_in(client, email)
    with connect(db) as c:
        uid = c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()["id"]
        assert auth.set_user_active(c, uid, False)
        assert c.execute("SELECT count(*) AS n FROM user_sessions WHERE user_id = %s", (uid,)).fetchone()["n"] == 0
    assert client.get("/audit/").status_code == 302


def test_sign_out_everywhere_from_the_account_page(app, db):
    email = add_user(db, "support_agent", tenant="acme", operator=False)
    laptop, phone = app.test_client(), app.test_client()
    sign_in(laptop, email)
    sign_in(phone, email)
    page = laptop.get("/account").get_data(as_text=True)
    assert "Sign out everywhere" in page and "<dd>2</dd>" in page
    r = laptop.post("/account/sign-out-everywhere", data={"csrf_token": _csrf(laptop)})
    assert r.status_code == 302
    assert phone.get("/account").status_code == 302
    assert laptop.get("/account").status_code == 302
    with connect(db) as c:
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'auth.logout_everywhere'"
                         ).fetchone()["n"] == 1


def test_expired_session_does_not_load(app, client, db):
    email = add_user(db, "ops")
    sign_in(client, email)
    with connect(db) as c:
        c.execute("UPDATE user_sessions SET expires_at = now() - interval '1 second'")
    assert client.get("/audit/").status_code == 302


# ---------------------------------------------------------------- 2. atomic login throttle

def test_concurrent_wrong_passwords_check_at_most_five(db):
    email = add_user(db, "ops")
    results: list[str] = []
    barrier = threading.Barrier(24)
    lock = threading.Lock()

    def attempt(i):
        with connect(db) as c:
            barrier.wait()
            try:
                out = auth.authenticate(c, email, "wrong password", f"10.0.0.{i}")
                kind = "checked" if out is None else "signed-in"
            except auth.LoginThrottled:
                kind = "throttled"
        with lock:
            results.append(kind)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 24
    assert results.count("checked") <= 5, results
    assert results.count("checked") + results.count("throttled") == 24


def test_concurrent_logins_from_one_address_are_bounded(db):
    emails = [add_user(db, "ops") for _ in range(3)]
    checked = []
    barrier = threading.Barrier(24)

    def attempt(i):
        with connect(db) as c:
            barrier.wait()
            try:
                if auth.authenticate(c, emails[i % 3], "wrong", "10.9.9.9", max_account=100, max_address=7) is None:
                    checked.append(i)
            except auth.LoginThrottled:
                pass

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(checked) <= 7


def test_a_success_does_not_count_as_a_failure(db):
    email = add_user(db, "ops")
    with connect(db) as c:
        for _ in range(10):
            assert auth.authenticate(c, email, PASSWORD, "10.1.1.1") is not None
        assert c.execute("SELECT count(*) AS n FROM login_failures").fetchone()["n"] == 0


# ---------------------------------------------------------------- 3. only POST signs in

def test_head_with_a_form_body_does_not_sign_in(client, db):
    email = add_user(db, "ops")
    r = client.open("/login", method="HEAD", data={"email": email, "password": PASSWORD})
    assert r.status_code == 200
    assert client.get("/audit/").status_code == 302  # not signed in
    with connect(db) as c:
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'auth.login'").fetchone()["n"] == 0


# ---------------------------------------------------------------- 4. identifiers on job pages

def test_job_page_redacts_identifiers(client, login_as, db):
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        [job] = seed.jobs(c, t, 1, payload={"card": "x"}, idempotency_key="otp:frank@example.com:1234",
                          group_key="user:frank@example.com", correlation_id="signup:frank@example.com")
        [plain] = seed.jobs(c, t, 1, correlation_id="order-42")
    login_as("ops")
    html = client.get(f"/jobs/{job}").get_data(as_text=True)
    assert "frank@example.com" not in html and "frank%40example.com" not in html
    assert "otp:[email]:1234" in html and "user:[email]" in html and "signup:[email]" in html
    html = client.get(f"/jobs/{plain}").get_data(as_text=True)
    assert 'href="/jobs/?correlation_id=order-42"' in html  # nothing to hide: still a link


# ---------------------------------------------------------------- 5. denied actions audited

def _denied(db):
    with connect(db) as c:
        return c.execute("SELECT * FROM audit_log WHERE outcome = 'denied' ORDER BY at").fetchall()


def test_denied_replay_and_resolve_are_audited_once_a_minute(app, client, login_as, db):
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        [job] = seed.jobs(c, t, 1)
        seed.kill(c, [job])
    agent = login_as("support_agent", tenant="acme", operator=False)
    for _ in range(3):
        r = client.post(f"/jobs/{job}/replay", data={"csrf_token": client.csrf, "reason": "pls",
                                                     "request_key": str(uuid.uuid4())}, headers=JSON)
        assert r.status_code == 403
    r = client.post(f"/jobs/{job}/resolve", data={"csrf_token": client.csrf, "reason": "pls",
                                                  "resolution": "resolved", "request_key": str(uuid.uuid4())},
                    headers=JSON)
    assert r.status_code == 403
    rows = _denied(db)
    assert [(r["action"], r["actor_label"], r["target_id"]) for r in rows] == [
        ("job.replay", agent, str(job)), ("job.resolve", agent, str(job))]  # three replays: one row
    assert all(r["reason"] is None and r["before"] is None and r["after"] is None for r in rows)
    assert rows[0]["tenant_id"] == t  # in the tenant's own log too
    # A GET of a page the role lacks is not an action: nothing recorded.
    client.get("/workers/")
    assert len(_denied(db)) == 2

    admin = app.test_client()
    with connect(db) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "boss@example.test", PASSWORD, "admin", "operator")
    sign_in(admin, "boss@example.test")
    page = admin.get("/audit/?action=job.replay").get_data(as_text=True)
    assert agent in page and ">denied</span>" in page


# ---------------------------------------------------------------- 6. operator staff anonymous to tenants

def _staff(c, email: str):
    """An ops member of the operator tenant; returns their user id."""
    auth.ensure_tenant(c, "operator", is_operator=True)
    auth.create_user(c, email, PASSWORD, "ops", "operator")
    return c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()["id"]


def test_tenant_viewers_see_operator_staff_by_role(app, client, login_as, db):
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        staff = _staff(c, "alice.staff@example.test")
        from opsboard import audit
        audit.record(c, audit.Actor("alice.staff@example.test", staff), "job.replay", target_type="job",
                     target_id="x", tenant_id=t, reason="staff-did-this",
                     after={"by": "alice.staff@example.test"})
    login_as("admin", tenant="acme", operator=False)
    page = client.get("/audit/").get_data(as_text=True)
    assert "staff-did-this" in page
    assert "alice.staff" not in page
    assert "operator staff (ops)" in page
    # Typing part of the address finds nothing.
    assert "staff-did-this" not in client.get("/audit/?actor=alice").get_data(as_text=True)
    # Operator staff still see the address.
    op = app.test_client()
    sign_in(op, "alice.staff@example.test")
    assert "alice.staff@example.test" in op.get("/audit/?actor=alice").get_data(as_text=True)


# ---------------------------------------------------------------- 7. trusted hosts

@pytest.fixture
def hosted_app(db_url):
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=2).open()
    config = make_config(database_url=db_url, trusted_hosts=("dash.example.com", "127.0.0.1"))
    application = create_app({"OPSBOARD": config, "DATABASE": database, "TESTING": True})
    yield application
    database.close()


def test_forged_host_header_is_refused(hosted_app):
    client = hosted_app.test_client()
    r = client.get("/jobs", headers={"Host": "evil.example"})
    assert r.status_code == 400
    assert "evil.example" not in r.headers.get("Location", "")
    r = client.get("/login", headers={"Host": "dash.example.com"})
    assert r.status_code == 200
    r = client.get("/jobs", headers={"Host": "dash.example.com"})
    assert r.status_code in (301, 302, 308) and "evil" not in r.headers["Location"]


def test_trusted_hosts_come_from_the_environment():
    from opsboard.config import Config, ConfigError
    c = Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_TRUSTED_HOSTS": "Dash.Example.com, .example.org"})
    assert c.trusted_hosts == ("dash.example.com", ".example.org")
    with pytest.raises(ConfigError, match="OPSBOARD_TRUSTED_HOSTS"):
        Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_TRUSTED_HOSTS": "http://x/"})


# ---------------------------------------------------------------- 8. CSP without inline styles

def test_csp_allows_no_inline_style(client, login_as, db):
    import re
    from pathlib import Path
    from opsboard.config import resource_dir
    TEMPLATES_DIR = resource_dir("templates")
    r = client.get("/login")
    csp = r.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in csp and "style-src 'self'" in csp
    offenders = [str(p) for p in Path(TEMPLATES_DIR).rglob("*.html")
                 if re.search(r"\sstyle\s*=|<style", p.read_text(encoding="utf-8"), re.I)]
    assert offenders == []
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        seed.jobs(c, t, 2)
    login_as("admin")
    for path in ("/queues/", "/tenants/", f"/tenants/{t}", "/jobs/", "/workers/", "/alerts/", "/audit/", "/account"):
        html = client.get(path).get_data(as_text=True)
        assert not re.search(r"\sstyle\s*=|<style", html, re.I), path
    assert '"includeIndicatorStyles": false' in client.get("/queues/").get_data(as_text=True)


# ---------------------------------------------------------------- dashboard 3: navigation and landing pages

def _nav(html: str) -> list[str]:
    import re
    nav = re.search(r'<nav class="mainnav".*?</nav>', html, re.S).group(0)
    return re.findall(r'<a href="([^"]+)"', nav)


def test_nav_shows_only_pages_the_user_may_open(client, login_as, db):
    with connect(db) as c:
        seed.tenant(c, "acme")
    login_as("ops", tenant="acme", operator=False)
    links = _nav(client.get("/jobs/").get_data(as_text=True))
    assert "/workers/" not in links and links
    for href in links:
        assert client.get(href).status_code == 200, href


def test_operator_ops_nav_includes_workers(client, login_as):
    login_as("ops")
    links = _nav(client.get("/jobs/").get_data(as_text=True))
    assert "/workers/" in links
    for href in links:
        assert client.get(href).status_code == 200, href


def test_a_template_author_lands_on_the_template_list(client, login_as):
    login_as("template_author", tenant="acme", operator=False)
    r = client.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("/templates/")
    html = client.get("/templates/").get_data(as_text=True)
    assert _nav(html) == ["/templates/"]  # the one page they may open: no links that answer 403


def test_a_support_agent_lands_on_the_ticket_queue(client, login_as):
    login_as("support_agent", tenant="acme", operator=False)
    r = client.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("/tickets/")
    html = client.get("/tickets/").get_data(as_text=True)
    assert _nav(html) == ["/tickets/"]  # the one page they may open


# ---------------------------------------------------------------- dashboard 4 and 6: names, error codes, warnings

def test_bulk_replay_confirmation_names_the_tenant_and_warns_of_permanent_errors(client, login_as, db):
    with connect(db) as c:
        t = auth.ensure_tenant(c, "acme", "Acme Persia")["id"]
        dead = seed.jobs(c, t, 2, "test.permanent")
        seed.kill(c, dead, "http_410")  # attempts 1 of max_attempts: died of a permanent error
    login_as("ops")
    html = client.get(f"/jobs/replay-many/confirm?type=test.permanent&error_code=http_410&tenant_id={t}",
                      headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "Acme Persia" in html and f"<code>{t}</code>" not in html
    assert 'data-permanent="2"' in html and "will fail again" in html


def test_queue_health_lists_top_failing_codes_with_links(client, login_as, db):
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        seed.kill(c, seed.jobs(c, t, 3, "test.permanent"), "http_410")
        seed.fail(c, seed.jobs(c, t, 1, "test.raise"), "smtp_timeout")
    login_as("ops")
    html = client.get("/queues/").get_data(as_text=True)
    assert "Top failing error codes" in html
    first = html.index('data-error-code="http_410"')
    assert first < html.index('data-error-code="smtp_timeout"')  # most failures first
    assert 'href="/jobs/?type=test.permanent&amp;error_code=http_410"' in html
    assert "#group-test.permanent-http_410" in html
    assert 'id="group-test.permanent-http_410"' in client.get("/dead/").get_data(as_text=True)
    assert "amber</span> when jobs of that type died" in html


# ---------------------------------------------------------------- dashboard 7 and 8: bidi isolation, dark theme

def test_user_text_is_isolated_not_the_block(client, login_as, db):
    with connect(db) as c:
        t = auth.ensure_tenant(c, "pars", "شرکت پارس")["id"]
        seed.jobs(c, t, 1)
    login_as("ops")
    html = client.get(f"/tenants/{t}").get_data(as_text=True)
    assert "<h1><bdi>شرکت پارس</bdi>" in html and '<h1 dir="auto">' not in html


def test_stylesheet_has_a_dark_theme(client):
    css = client.get("/static/css/opsboard.css").get_data(as_text=True)
    assert "@media (prefers-color-scheme: dark)" in css and "color-scheme: light dark" in css


# ---------------------------------------------------------------- dashboard 5: time-series charts

def _stats(c, minute, queue, type_, succeeded=0, retried=0, dead=0, hist_ms=None):
    from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
    hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
    for ms, n in (hist_ms or {}).items():
        hist[bucket_index(ms)] += n
    c.execute("""INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, duration_hist)
                 VALUES (%s, 'w1', %s, %s, %s, %s, %s, %s)""", (minute, queue, type_, succeeded, retried, dead, hist))


def test_throughput_charts_per_queue_and_type(db):
    from datetime import timedelta
    from opsboard import metrics
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        _stats(c, now - timedelta(minutes=2), "default", "email.send", succeeded=30, retried=6, hist_ms={40: 95, 900: 5})
        _stats(c, now - timedelta(minutes=2), "default", "sms.send", succeeded=10, dead=2, hist_ms={15: 12})
        _stats(c, now - timedelta(hours=3), "bulk", "report.build", succeeded=150, hist_ms={4000: 150})
        queues, types = metrics.throughput_charts(c, "1h", now=now)
        d = queues["default"]
        assert len(d.buckets) == 60 and d.buckets[-1] == now
        assert d.processed[-3] == 48 and d.failed[-3] == 8
        assert types[("default", "email.send")].p95[-3] == 50  # 95 of 100 within the 50 ms bucket
        assert "bulk" not in queues  # three hours ago: outside the hour
        # 24 hours from the history rollup (issue 44), as the leader's history service keeps it.
        from opsboard import history
        history.roll_up(c, now, since_days=1)
        queues24, _ = metrics.throughput_charts(c, "24h", now=now)
        assert len(queues24["bulk"].buckets) == 96
        assert sum(queues24["bulk"].processed) == 150 / 15  # per minute, averaged over the 15-min bucket
        # p95 inside its bucket (2,000-5,000 ms), not the bucket's bound: 2000 + 3000 x 142.5 / 150
        assert queues24["bulk"].p95[[i for i, v in enumerate(queues24["bulk"].p95) if v][0]] == 4850


def test_queue_page_renders_charts_with_axes_legend_and_hover(client, login_as, db):
    from datetime import timedelta
    with connect(db) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        _stats(c, now - timedelta(minutes=1), "critical", "otp.send", succeeded=12, retried=3, hist_ms={80: 15})
    login_as("ops")
    html = client.get("/queues/").get_data(as_text=True)
    # critical's three charts (attempts, p95, waiting); otp.send's are on its own page, linked (issue 44).
    assert html.count('data-axis="x"') == 3 and html.count('data-axis="y"') == 3
    assert "/queues/critical/types/otp.send?range=1h" in html
    assert "processed / min" in html and "failed / min" in html and "p95 handler time" in html
    assert 'class="legend"' in html and "<rect" in html and "processed / min: 15 /min; failed / min: 3 /min" in html
    assert "sparkline" not in html and 'class="spark"' not in html
    assert client.get("/queues/_charts?range=24h").status_code == 200
    assert client.get("/queues/_charts?range=7d").status_code == 200
    r = client.get("/queues/_charts?range=30d", headers=JSON)
    assert r.status_code == 400 and r.json["error"] == "invalid_range"


def test_tenant_page_has_its_own_charts_and_recent_failures(client, login_as, db):
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        other = seed.tenant(c, "other")
        seed.kill(c, seed.jobs(c, t, 2, "test.permanent"), "http_410")
        seed.kill(c, seed.jobs(c, other, 1, "test.permanent"), "other_tenant_code")
    login_as("ops", tenant="acme", operator=False)
    html = client.get(f"/tenants/{t}").get_data(as_text=True)
    assert 'data-axis="x"' in html and "failed / min" in html
    assert "http_410" in html and "other_tenant_code" not in html
    assert "failed / min: 2 /min" in html


def test_tenant_viewers_see_staff_by_role_on_alerts_and_job_resolutions(app, client, login_as, db):
    from opsboard import alerts, audit, dashboard
    from opsboard.auth import TenantScope
    from opsboard.schema import new_id
    with connect(db) as c:
        t = seed.tenant(c, "acme")
        bob = audit.Actor("bob.staff@example.test", _staff(c, "bob.staff@example.test"))
        alert = c.execute(
            "INSERT INTO alerts (id, rule, key, tenant_id, severity, summary, details, opened_at, last_seen_at) "
            "VALUES (%s, 'dead_rising', 'acme', %s, 'warning', 'dead jobs rising', '{}', now(), now()) RETURNING id",
            (new_id(), t)).fetchone()["id"]
        alerts.acknowledge(c, alert, bob, "looking into it", None, scope=TenantScope(all=True))
        [job] = seed.jobs(c, t)
        seed.kill(c, [job])
        dashboard.resolve(c, job, "resolved", bob, "fixed by hand", None, scope=TenantScope(all=True))
        # The service layer hides staff from tenant scopes and only from them.
        tenant_scope = TenantScope(all=False, ids=(t,))
        assert alerts.get_alert(c, tenant_scope, alert)["acknowledged_by"] == "operator staff (ops)"
        assert alerts.get_alert(c, TenantScope(all=True), alert)["acknowledged_by"] == "bob.staff@example.test"
        assert dashboard.job_detail(c, tenant_scope, job).job["resolution_actor"] == "operator staff (ops)"
    login_as("admin", tenant="acme", operator=False)
    for path in ("/alerts/", f"/alerts/{alert}", f"/jobs/{job}"):
        page = client.get(path).get_data(as_text=True)
        assert "bob.staff" not in page, path
        assert "operator staff (ops)" in page, path
    op = app.test_client()
    sign_in(op, "bob.staff@example.test")
    assert "bob.staff@example.test" in op.get(f"/alerts/{alert}").get_data(as_text=True)
