"""The end-user inbox API and its SSE stream, against the app served over real HTTP in a thread."""
from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

import pytest
from werkzeug.serving import make_server

from opsboard import auth, outbox
from opsboard.notifications import fanout, inbox, preferences
from tests.conftest import connect
from tests.integration.test_notifications import _notice  # noqa: F401  (declares test_notice.sent)


def _member(c, slug="inbox-t"):
    t = auth.ensure_tenant(c, slug)
    u = auth.create_user(c, f"m-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", "support_agent", slug)
    preferences.set_profile(c, u["id"], phone=None)
    secret, _ = inbox.create_token(c, u["id"])
    return t, u["id"], secret


def _notify(c, t, uid, n=1):
    out = []
    for _ in range(n):
        ev = outbox.publish(c, "test_notice.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=t["id"],
                            payload={"user_ids": [str(uid)]})
        fanout.fan_out(c, ev["id"])
        out.append(ev["id"])
    return out


@pytest.fixture
def server(app):
    app.config["SSE_HEARTBEAT"] = 0.3
    app.config["SSE_MAX_PER_USER"] = 2
    app.config["SSE_MAX_STREAMS"] = 20  # the per-user cap is under test here; the process's: test_inbox_streams_web
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv.server_port
    srv.shutdown()
    hub = app.extensions.get("opsboard_pgnotify")
    if hub:
        hub.stop()


class Stream:
    """A raw SSE client over http.client: reads events line by line with a deadline."""

    def __init__(self, port, token, last_event_id=None):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.c.request("GET", "/api/v1/inbox/stream", headers=headers)
        self.r = self.c.getresponse()
        self.comments = []

    def next_event(self, deadline=10.0) -> dict | None:
        end = time.monotonic() + deadline
        ev = {}
        while time.monotonic() < end:
            line = self.r.fp.readline().decode()
            if line == "":
                return None
            line = line.rstrip("\n")
            if line.startswith(":"):
                self.comments.append(line)
            elif line == "" and "data" in ev:
                return ev
            elif ":" in line:
                k, _, v = line.partition(":")
                ev[k] = v.strip()
        return None

    def close(self):
        self.c.close()


def _get(port, path, token, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    body = json.loads(r.read() or b"null")
    c.close()
    return r.status, body


def test_inbox_api_list_detail_mark_and_errors(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        t, uid, token = _member(c)
        _notify(c, t, uid, 3)
    status, body = _get(server, "/api/v1/inbox?limit=2", token)
    assert status == 200 and len(body["items"]) == 2 and body["unread"] == 3
    cursors = [i["cursor"] for i in body["items"]]
    status, more = _get(server, f"/api/v1/inbox?cursor={body['next_cursor']}", token)
    assert len(more["items"]) == 1 and more["items"][0]["cursor"] < min(cursors) and more["next_cursor"] is None
    first = body["items"][0]
    status, detail = _get(server, f"/api/v1/inbox/{first['id']}", token)
    assert status == 200 and "body" in detail
    status, marked = _get(server, f"/api/v1/inbox/{first['id']}/read", token, "POST")
    assert status == 200 and marked["read"] and marked["unread"] == 2
    assert _get(server, "/api/v1/inbox/unread", token) == (200, {"unread": 2})
    assert _get(server, "/api/v1/inbox", "obu_wrong")[0] == 401
    assert _get(server, "/api/v1/inbox?cursor=abc", token)[1]["error"] == "invalid_cursor"
    assert _get(server, f"/api/v1/inbox/{uuid.uuid4()}", token)[0] == 404
    assert _get(server, f"/api/v1/inbox/{first['id']}/bogus", token, "POST")[0] == 404


def test_sse_live_rows_and_last_event_id_yields_exactly_the_missed_rows(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        t, uid, token = _member(c)
        _notify(c, t, uid, 1)
    s = Stream(server, token)
    assert s.r.status == 200 and s.r.getheader("Content-Type").startswith("text/event-stream")
    # Let the stream register and the hub LISTEN, then publish.
    deadline = time.monotonic() + 10
    while not (app.extensions.get("opsboard_pgnotify") and app.extensions["opsboard_pgnotify"].connected.is_set()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with connect(app.extensions["test_db_url"]) as c:
        _notify(c, t, uid, 1)
    live = s.next_event()
    assert live is not None and live["event"] == "notification"
    last_seen = int(live["id"])
    s.close()
    # While disconnected, three rows arrive.
    with connect(app.extensions["test_db_url"]) as c:
        missed = _notify(c, t, uid, 3)
    s2 = Stream(server, token, last_event_id=last_seen)
    got = [s2.next_event() for _ in range(3)]
    assert [json.loads(e["data"])["event_type"] for e in got] == ["test_notice.sent"] * 3
    ids = [int(e["id"]) for e in got]
    assert ids == sorted(ids) and ids[0] > last_seen
    with connect(app.extensions["test_db_url"]) as c:
        rows = inbox.since(c, uid, last_seen)
    assert [r["seq"] for r in rows] == ids and {r["event_id"] for r in rows} == set(missed)
    # Nothing else comes but heartbeats.
    assert s2.next_event(deadline=1.0) is None
    assert any("heartbeat" in x for x in s2.comments)
    s2.close()


def test_streams_per_user_are_bounded(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        _, _, token = _member(c)
    a, b = Stream(server, token), Stream(server, token)
    assert a.r.status == 200 and b.r.status == 200
    c3 = Stream(server, token)
    assert c3.r.status == 429 and json.loads(c3.r.read())["error"] == "too_many_streams"
    for s in (a, b, c3):
        s.close()


def test_device_register_and_unregister(app, server):
    with connect(app.extensions["test_db_url"]) as c:
        _, uid, token = _member(c)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    body = json.dumps({"endpoint": "https://push.example.test/abc", "keys": {"p256dh": "k", "auth": "a"}})
    conn.request("POST", "/api/v1/devices", body=body, headers={"Authorization": f"Bearer {token}",
                                                                  "Content-Type": "application/json"})
    r = conn.getresponse()
    created = json.loads(r.read())
    assert r.status == 201 and created["state"] == "active"
    conn.request("POST", "/api/v1/devices", body="{}", headers={"Authorization": f"Bearer {token}",
                                                                "Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 400 and json.loads(r.read())["error"] == "invalid_subscription"
    conn.close()
    assert _get(server, f"/api/v1/devices/{created['id']}", token, "DELETE") == \
        (200, {"id": created["id"], "state": "revoked"})
    assert _get(server, f"/api/v1/devices/{created['id']}", token, "DELETE")[0] == 404
