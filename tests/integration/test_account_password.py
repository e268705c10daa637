"""Changing one's own password from the account page, and expired sessions
forgotten by the pruner (not only at the next sign-in)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from tests.conftest import connect, csrf_from
from tests.integration.test_auth_web import PASSWORD, add_user, sign_in
from worker.services.pruner import Pruner

NEW = "a brand new passphrase"


@pytest.fixture
def db(app):
    return app.extensions["test_db_url"]


def _change(client, current=PASSWORD, new=NEW, again=None):
    return client.post("/account/password", data={
        "csrf_token": csrf_from(client, "/account"), "current_password": current,
        "new_password": new, "new_password_again": NEW if again is None else again})


def _audits(db, action):
    with connect(db) as c:
        return c.execute("SELECT count(*) AS n FROM audit_log WHERE action = %s", (action,)).fetchone()["n"]


def test_password_change_keeps_this_browser_and_ends_the_others(app, db):
    email = add_user(db, "support_agent", tenant="acme", operator=False)
    laptop, phone = app.test_client(), app.test_client()
    sign_in(laptop, email)
    sign_in(phone, email)
    r = _change(laptop)
    assert r.status_code == 302 and r.headers["Location"].endswith("/account")
    assert laptop.get("/account").status_code == 200        # still signed in here
    assert phone.get("/account").status_code == 302         # signed out there
    assert _audits(db, "auth.password_change") == 1
    # The new password signs in, the old one does not.
    fresh = app.test_client()
    assert sign_in(fresh, email, PASSWORD).status_code == 401
    assert sign_in(fresh, email, NEW).status_code == 302


@pytest.mark.parametrize("current,new,again,status,message", [
    ("wrong password!", NEW, NEW, 403, "The current password is wrong."),
    (PASSWORD, NEW, NEW + "x", 400, "The two new passwords differ."),
    (PASSWORD, "short", "short", 400, "at least 8 characters"),
    (PASSWORD, PASSWORD, PASSWORD, 400, "must differ from the current one"),
])
def test_refused_password_changes_say_why_and_change_nothing(app, client, db, current, new, again, status, message):
    email = add_user(db, "ops")
    sign_in(client, email)
    r = _change(client, current, new, again)
    assert r.status_code == status
    assert message in r.get_data(as_text=True)
    assert client.get("/account").status_code == 200        # still signed in
    assert _audits(db, "auth.password_change") == 0
    assert sign_in(app.test_client(), email, PASSWORD).status_code == 302


def test_wrong_current_passwords_are_throttled_like_sign_ins(app, client, db):
    email = add_user(db, "ops")
    sign_in(client, email)
    statuses = [_change(client, "wrong password!").status_code for _ in range(6)]
    assert statuses[:5] == [403] * 5 and statuses[5] == 429
    # Even the right password is refused while throttled.
    assert _change(client).status_code == 429


def test_password_change_needs_csrf_and_a_session(app, client, db):
    email = add_user(db, "ops")
    r = client.post("/account/password", data={"current_password": PASSWORD, "new_password": NEW,
                                               "new_password_again": NEW})
    assert r.status_code in (302, 400, 401, 403)
    sign_in(client, email)
    r = client.post("/account/password", data={"current_password": PASSWORD, "new_password": NEW,
                                               "new_password_again": NEW})
    assert r.status_code == 400  # no CSRF token
    assert sign_in(app.test_client(), email, PASSWORD).status_code == 302


def test_pruner_forgets_expired_sessions(app, client, db):
    email = add_user(db, "ops")
    sign_in(client, email)
    sign_in(app.test_client(), email)
    with connect(db) as c:
        now = c.execute("SELECT now() AS t").fetchone()["t"]
        live = c.execute("SELECT count(*) AS n FROM user_sessions").fetchone()["n"]
        assert live == 2
        first, second = [r["id_hash"] for r in c.execute("SELECT id_hash FROM user_sessions")]
        c.execute("UPDATE user_sessions SET expires_at = %s WHERE id_hash = %s", (now + timedelta(hours=1), first))
        c.execute("UPDATE user_sessions SET expires_at = %s WHERE id_hash = %s", (now + timedelta(hours=10), second))
        Pruner().run_once(c, now=now + timedelta(hours=2))
        assert [r["id_hash"] for r in c.execute("SELECT id_hash FROM user_sessions")] == [second]
