"""Sign-in, sign-out, login throttling, CSRF, permissions, tenant scope, open
redirects, cookies and security headers, through the Flask test client on a
cloned database."""
from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest

from opsboard import audit, auth
from opsboard.db import Database
from tests.conftest import app_url, connect, csrf_from
from tests.conftest import make_config

PASSWORD = "correct horse battery"


def add_user(db_url, role="ops", *, tenant="operator", operator=True, email=None, password=PASSWORD):
    email = email or f"{role}-{uuid.uuid4().hex[:6]}@example.test"
    with connect(db_url) as c:
        auth.ensure_tenant(c, tenant, is_operator=operator)
        auth.create_user(c, email, password, role, tenant)
    return email


def sign_in(client, email, password=PASSWORD, **extra):
    token = csrf_from(client)
    return client.post("/login", data={"email": email, "password": password, "csrf_token": token, **extra})


def audit_count(db_url, action) -> int:
    with connect(db_url) as c:
        return c.execute("SELECT count(*) AS n FROM audit_log WHERE action = %s", (action,)).fetchone()["n"]


@pytest.fixture
def db(app):
    return app.extensions["test_db_url"]


# ---------------------------------------------------------------- sign in / out

def test_login_page_renders_with_csrf_token(client):
    r = client.get("/login")
    assert r.status_code == 200
    assert b"Sign in" in r.data
    assert b'name="csrf_token"' in r.data
    assert r.headers["Content-Type"].startswith("text/html")


def test_pages_need_a_session(client):
    r = client.get("/audit/")
    assert r.status_code == 302
    assert r.headers["Location"].startswith("/login?next=")
    assert client.get("/").status_code == 302


def test_login_and_logout(client, db):
    email = add_user(db, "support_agent", tenant="acme", operator=False)   # lands on /tickets/
    r = sign_in(client, email)
    assert r.status_code == 302
    assert r.headers["Location"] == "/"
    home = client.get("/", follow_redirects=True)
    assert home.status_code == 200 and home.request.path == "/tickets/"
    assert email.encode() in home.data
    assert audit_count(db, "auth.login") == 1
    with connect(db) as c:
        assert c.execute("SELECT last_login_at FROM users WHERE email = %s", (email,)).fetchone()["last_login_at"]

    # Logout is a POST with the CSRF token: a GET does nothing, a POST without token is refused.
    assert client.get("/logout").status_code == 405
    assert client.post("/logout").status_code == 400
    assert client.get("/tickets/").status_code == 200
    token = csrf_from(client, "/tickets/")
    r = client.post("/logout", data={"csrf_token": token})
    assert r.status_code == 302 and r.headers["Location"] == "/login"
    assert audit_count(db, "auth.logout") == 1
    assert client.get("/").status_code == 302
    assert b"Signed out." in client.get("/login").data


def test_login_when_already_signed_in_redirects(client, db):
    email = add_user(db)
    assert sign_in(client, email).status_code == 302
    r = client.get("/login?next=/audit/")
    assert r.status_code == 302 and r.headers["Location"] == "/audit/"


def test_wrong_password_is_401_with_message(client, db):
    email = add_user(db)
    r = sign_in(client, email, "not the password")
    assert r.status_code == 401
    assert b"Wrong email or password." in r.data
    assert email.encode() in r.data  # the form keeps the email
    unknown = sign_in(client, "nobody@example.test", PASSWORD)
    assert unknown.status_code == 401 and b"Wrong email or password." in unknown.data
    with connect(db) as c:
        assert c.execute("SELECT count(*) AS n FROM login_failures").fetchone()["n"] == 2
    assert client.get("/audit/").status_code == 302  # still signed out


def test_email_is_case_insensitive(client, db):
    email = add_user(db)
    assert sign_in(client, "  " + email.upper() + " ").status_code == 302


def test_inactive_user_cannot_sign_in(client, db):
    email = add_user(db)
    with connect(db) as c:
        c.execute("UPDATE users SET is_active = false WHERE email = %s", (email,))
    assert sign_in(client, email).status_code == 401


def test_user_without_membership_is_refused(client, db):
    email = add_user(db, tenant="acme", operator=False)
    with connect(db) as c:
        c.execute("UPDATE memberships SET active = false")
    r = sign_in(client, email)
    assert r.status_code == 403
    assert b"no active role" in r.data
    assert client.get("/").status_code == 302


def test_deactivated_user_loses_the_session(client, db):
    email = add_user(db)
    assert sign_in(client, email).status_code == 302
    assert client.get("/audit/").status_code == 200
    with connect(db) as c:
        c.execute("UPDATE users SET is_active = false WHERE email = %s", (email,))
    assert client.get("/audit/").status_code == 302


# ---------------------------------------------------------------- throttling

def test_account_is_throttled_after_five_failures(client, db):
    email = add_user(db)
    for _ in range(5):
        assert sign_in(client, email, "wrong password").status_code == 401
    r = sign_in(client, email)  # the right password does not help now
    assert r.status_code == 429
    retry = int(r.headers["Retry-After"])
    assert 0 < retry <= 900
    assert b"Too many failed sign-ins" in r.data
    assert b"Try again in about 15 minutes" in r.data
    assert client.get("/audit/").status_code == 302
    # Another account from the same address is not affected.
    other = add_user(db)
    assert sign_in(client, other).status_code == 302


def test_throttle_counts_across_sessions(app, db):
    email = add_user(db)
    for _ in range(5):
        assert sign_in(app.test_client(), email, "wrong password").status_code == 401
    assert sign_in(app.test_client(), email).status_code == 429


def test_success_resets_the_account_counter(client, db):
    email = add_user(db)
    for _ in range(3):
        assert sign_in(client, email, "wrong password").status_code == 401
    assert sign_in(client, email).status_code == 302
    assert client.post("/logout", data={"csrf_token": csrf_from(client, "/audit/")}).status_code == 302
    for _ in range(3):  # 6 failures in the window, but only 3 since the success
        assert sign_in(client, email, "wrong password").status_code == 401
    assert sign_in(client, email).status_code == 302


@pytest.fixture
def strict_app(db_url):
    from opsboard.web.app import create_app
    database = Database(db_url, min_size=1, max_size=2).open()
    app = create_app({"OPSBOARD": make_config(database_url=db_url, login_max_failures_address=3),
                      "DATABASE": database, "TESTING": True})
    yield app
    database.close()


def test_address_is_throttled_across_accounts(strict_app, db_url):
    victim = add_user(db_url)
    client = strict_app.test_client()
    for i in range(3):
        assert sign_in(client, f"guess{i}@example.test", "wrong password").status_code == 401
    r = sign_in(client, victim)
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) > 0
    assert b"Too many failed sign-ins" in r.data
    # Another address is not throttled.
    other = strict_app.test_client()
    token = csrf_from(other)
    r = other.post("/login", data={"email": victim, "password": PASSWORD, "csrf_token": token},
                   environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert r.status_code == 302


# ---------------------------------------------------------------- CSRF

def test_post_without_csrf_token_is_rejected_as_json(client, db):
    email = add_user(db)
    client.get("/login")
    r = client.post("/login", data={"email": email, "password": PASSWORD},
                    headers={"Accept": "application/json"})
    assert r.status_code == 400
    assert r.json["error"] == "csrf_invalid"
    assert r.json["message"]
    assert client.get("/audit/").status_code == 302  # not signed in


def test_post_with_wrong_csrf_token_is_rejected_as_html(client, db):
    email = add_user(db)
    csrf_from(client)
    r = client.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": "forged"})
    assert r.status_code == 400
    assert b"csrf_invalid" in r.data
    assert r.headers["Content-Type"].startswith("text/html")


def test_token_from_another_session_is_rejected(app, db):
    email = add_user(db)
    token = csrf_from(app.test_client())
    other = app.test_client()
    other.get("/login")
    r = other.post("/login", data={"email": email, "password": PASSWORD, "csrf_token": token})
    assert r.status_code == 400


def test_htmx_header_token_is_accepted(client, login_as):
    login_as("ops")
    token = csrf_from(client, "/audit/")
    bad = client.post("/logout", headers={"HX-Request": "true", "X-CSRFToken": "nope"})
    assert bad.status_code == 400
    assert b'data-error-code="csrf_invalid"' in bad.data  # the htmx partial, not a page
    assert b"<html" not in bad.data
    r = client.post("/logout", headers={"HX-Request": "true", "X-CSRFToken": token})
    assert r.status_code == 302
    assert client.get("/audit/").status_code == 302


# ---------------------------------------------------------------- roles and tenants

@pytest.mark.parametrize("role", ["support_agent", "template_author"])
def test_roles_without_audit_view_get_403(client, login_as, role):
    login_as(role)
    r = client.get("/audit/")
    assert r.status_code == 403
    assert b"audit.view" in r.data
    assert client.get("/audit/_rows").status_code == 403
    j = client.get("/audit/", headers={"Accept": "application/json"})
    assert j.status_code == 403 and j.json["error"] == "forbidden"


@pytest.mark.parametrize("role", ["ops", "admin"])
def test_roles_with_audit_view_see_the_page(client, login_as, role):
    login_as(role)
    r = client.get("/audit/")
    assert r.status_code == 200
    assert b"Audit log" in r.data


def seed_tenant_rows(db):
    with connect(db) as c:
        a = auth.ensure_tenant(c, "tenant-a")
        b = auth.ensure_tenant(c, "tenant-b")
        audit.record(c, audit.SYSTEM, "test.alpha", tenant_id=a["id"], reason="reason-of-a")
        audit.record(c, audit.SYSTEM, "test.beta", tenant_id=b["id"], reason="reason-of-b")
        audit.record(c, audit.SYSTEM, "test.global", reason="reason-without-tenant")


def test_tenant_member_sees_only_their_tenant(client, login_as, db):
    seed_tenant_rows(db)
    login_as("ops", tenant="tenant-a", operator=False)
    for path in ("/audit/", "/audit/_rows"):
        page = client.get(path).get_data(as_text=True)
        assert "reason-of-a" in page
        assert "reason-of-b" not in page
        assert "reason-without-tenant" not in page
    # Asking for the other tenant's action explicitly finds nothing either.
    assert "reason-of-b" not in client.get("/audit/?action=test.beta").get_data(as_text=True)


def test_role_in_another_tenant_does_not_widen_the_scope(client, login_as, db):
    seed_tenant_rows(db)
    email = login_as("ops", tenant="tenant-a", operator=False)
    with connect(db) as c:
        # A support role in tenant B grants no audit.view there.
        auth.create_user(c, email, PASSWORD, "support_agent", "tenant-b")
    page = client.get("/audit/").get_data(as_text=True)
    assert "reason-of-a" in page and "reason-of-b" not in page


def test_operator_ops_sees_every_tenant(client, login_as, db):
    seed_tenant_rows(db)
    login_as("ops")
    page = client.get("/audit/").get_data(as_text=True)
    for reason in ("reason-of-a", "reason-of-b", "reason-without-tenant"):
        assert reason in page


# ---------------------------------------------------------------- open redirects

UNSAFE_NEXT = ["https://evil.example/", "//evil.example/", "///evil.example/", "/\\evil.example/",
               "\\\\evil.example/", "/\t/evil.example/", "/\n/evil.example/", "javascript:alert(1)",
               "evil.example", "http:/evil.example"]


def test_next_after_sign_in_stays_on_the_site(client, db):
    email = add_user(db)
    r = sign_in(client, email, next="https://evil.example/")
    assert r.status_code == 302 and r.headers["Location"] == "/"
    assert client.post("/logout", data={"csrf_token": csrf_from(client, "/audit/")}).status_code == 302
    r = sign_in(client, email, next="/audit/?actor=x")
    assert r.status_code == 302 and r.headers["Location"] == "/audit/?actor=x"


def test_next_never_leaves_the_site(client, db):
    # Signed in, /login redirects to ``next`` at once: the same check, without a password hash per case.
    assert sign_in(client, add_user(db)).status_code == 302
    for target in UNSAFE_NEXT:
        r = client.get("/login?next=" + quote(target, safe=""))
        assert r.status_code == 302
        assert r.headers["Location"] == "/", target
    assert client.get("/login?next=" + quote("/audit/?since=2026-01-01")).headers["Location"] == "/audit/?since=2026-01-01"


def test_next_is_carried_through_the_login_form(client):
    r = client.get("/audit/")
    page = client.get(r.headers["Location"]).get_data(as_text=True)
    assert 'name="next" value="/audit/"' in page


# ---------------------------------------------------------------- cookies and headers

def test_session_cookie_flags(client, db):
    email = add_user(db)
    r = sign_in(client, email)
    cookies = [v for v in r.headers.getlist("Set-Cookie") if v.startswith("opsboard_session=")]
    assert cookies, r.headers
    flags = [p.strip().lower() for p in cookies[-1].split(";")]
    assert "httponly" in flags
    assert "samesite=lax" in flags
    assert "secure" not in flags  # test mode runs on plain HTTP


def test_production_cookie_is_secure_and_hsts_is_sent(db_url):
    from opsboard.web.app import create_app
    database = Database(app_url(db_url), min_size=1, max_size=2).open()  # production refuses a superuser
    try:
        config = make_config(database_url=app_url(db_url)).replace(mode="production", secret_key="p" * 40)
        app = create_app({"OPSBOARD": config, "DATABASE": database})
        email = add_user(db_url)
        client = app.test_client()
        r = sign_in(client, email)
        assert r.status_code == 302
        cookie = [v for v in r.headers.getlist("Set-Cookie") if v.startswith("opsboard_session=")][-1]
        assert "Secure" in cookie and "HttpOnly" in cookie
        assert r.headers["Strict-Transport-Security"].startswith("max-age=")
    finally:
        database.close()


def test_production_app_refuses_to_start_without_secret(db_url):
    from opsboard.web.app import create_app
    from opsboard.config import ConfigError
    config = make_config(database_url=db_url).replace(mode="production", secret_key="")
    with pytest.raises(ConfigError, match="OPSBOARD_SECRET_KEY"):
        create_app({"OPSBOARD": config, "DATABASE": object()})


def test_security_headers_on_every_response(client):
    for path in ("/login", "/healthz", "/audit/", "/no-such-page"):
        r = client.get(path)
        assert r.headers["X-Content-Type-Options"] == "nosniff", path
        assert r.headers["X-Frame-Options"] == "DENY", path
        assert r.headers["Referrer-Policy"] == "same-origin", path
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert len(r.headers["X-Request-Id"]) == 32, path
        assert "Strict-Transport-Security" not in r.headers  # only in production (HTTPS)


def test_request_id_is_echoed_only_when_sane(client):
    assert client.get("/healthz", headers={"X-Request-Id": "abc-123"}).headers["X-Request-Id"] == "abc-123"
    bad = client.get("/healthz", headers={"X-Request-Id": "<script>"}).headers["X-Request-Id"]
    assert bad != "<script>" and len(bad) == 32


def test_not_found_is_a_clear_error(client):
    r = client.get("/no-such-page", headers={"Accept": "application/json"})
    assert r.status_code == 404
    assert r.json["error"] == "not_found"
    html = client.get("/no-such-page")
    assert html.status_code == 404 and b"404" in html.data and b"Traceback" not in html.data


def test_oversized_body_is_413(client):
    r = client.post("/login", data={"x": "a" * (1024 * 1024 + 10)}, headers={"Accept": "application/json"})
    assert r.status_code == 413
    assert r.json["error"] == "too_large"
