"""The web's side of the streams (issue 27): with OPSBOARD_STREAMS_URL both stream routes answer a 307 to the
stream server at once (and the page's CSP lets it connect there); without it the web serves streams itself,
at most OPSBOARD_SSE_MAX_STREAMS per process, so pages keep their threads: the next gets 503 + Retry-After
(and the inbox page polls /inbox/_since)."""
from __future__ import annotations

import json

from tests.conftest import connect
from tests.integration.test_inbox_api import Stream, _member, _notify, server  # noqa: F401  (fixture)


def test_with_a_stream_server_both_routes_redirect_at_once(app, client, login_as):
    app.extensions["opsboard_config"] = app.extensions["opsboard_config"].replace(
        streams_url="http://127.0.0.1:8001")
    r = client.get("/api/v1/inbox/stream?since=7", headers={"Last-Event-ID": "9"})
    assert r.status_code == 307 and r.headers["Location"] == "http://127.0.0.1:8001/api/v1/inbox/stream?since=7"
    r = client.get("/inbox/stream?since=3")
    assert r.status_code == 307 and r.headers["Location"] == "http://127.0.0.1:8001/inbox/stream?since=3"
    login_as("member", tenant="streams-web", operator=False)
    page = client.get("/inbox/")
    assert page.status_code == 200
    csp = page.headers["Content-Security-Policy"]
    assert "connect-src 'self' http://127.0.0.1:8001;" in csp and "default-src 'self'" in csp


def test_without_one_the_web_caps_its_own_streams_with_503(app, server):  # noqa: F811
    app.config["SSE_MAX_STREAMS"] = 1
    with connect(app.extensions["test_db_url"]) as c:
        _t, _uid, tok = _member(c, "cap-a")
        _t2, _uid2, tok2 = _member(c, "cap-b")
    first = Stream(server, tok)
    assert first.r.status == 200
    second = Stream(server, tok2)  # another user: the process's cap, not the user's
    assert second.r.status == 503 and int(second.r.getheader("Retry-After")) > 0
    assert json.loads(second.r.read())["error"] == "streams_full"
    second.close()
    first.close()
    assert "Content-Security-Policy" in second.r.headers


def test_the_page_polls_new_rows_since_a_cursor(app, client, login_as):
    from opsboard import auth
    from opsboard.notifications import inbox
    email = login_as("support_agent", tenant="poll-t", operator=False)
    with connect(app.extensions["test_db_url"]) as c:
        user = auth.load_principal(c, c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()["id"])
        t = c.execute("SELECT id FROM tenants WHERE slug = 'poll-t'").fetchone()
        _notify(c, t, user.id, n=2)
        rows = inbox.since(c, user.id, 0)
    r = client.get(f"/inbox/_since?since={rows[0]['seq']}")
    assert r.status_code == 200
    assert [i["id"] for i in r.get_json()["items"]] == [str(rows[1]["id"])]
    assert client.get("/inbox/_since?since=x").status_code == 400
    client.post("/logout", data={"csrf_token": client.csrf})
    assert client.get("/inbox/_since?since=0", headers={"Accept": "application/json"}).status_code == 401
