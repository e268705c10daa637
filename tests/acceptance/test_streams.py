"""The stream server (``opsboard streams``, issue 27) as a real process on a real database: it delivers a
user's new notification to that user's streams only, refuses without credentials, past its cap answers
503 with Retry-After, reads the dashboard's session cookie as the web does, and ends its streams at once
on SIGTERM."""
from __future__ import annotations

import json
import signal
import uuid
from datetime import datetime

import pytest

from opsboard import auth
from opsboard.notifications import inbox, preferences
from opsboard.web import sse
from tests.conftest import connect, wait_for
from tests.integration.test_inbox_api import _notify
from tests.integration.test_notifications import _notice  # noqa: F401  (declares test_notice.sent)
from tests.support.streams import SSE, start_streams

PASSWORD = "correct horse battery"


def _member(c, slug):
    t = auth.ensure_tenant(c, slug)
    u = auth.create_user(c, f"s-{uuid.uuid4().hex[:6]}@example.test", PASSWORD, "support_agent", slug)
    preferences.set_profile(c, u["id"], phone=None)
    secret, _ = inbox.create_token(c, u["id"])
    return t, u, secret


@pytest.fixture
def streams(db_url, tmp_path):
    started = []

    def start(**env):
        proc, port = start_streams(db_url, tmp_path / f"streams-{len(started)}.log", **env)
        started.append(proc)
        return proc, port

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _api(port, token, **headers):
    return SSE(port, "/api/v1/inbox/stream", {"Authorization": f"Bearer {token}", **headers})


def test_a_notification_reaches_its_users_streams_and_no_other_tenants(db_url, streams):
    _proc, port = streams()
    with connect(db_url) as c:
        ta, a, tok_a = _member(c, "streams-a")
        tb, b, tok_b = _member(c, "streams-b")
    sa1, sa2, sb = _api(port, tok_a), _api(port, tok_a), _api(port, tok_b)
    for s in (sa1, sa2, sb):
        assert s.r.status == 200 and s.r.getheader("Content-Type").startswith("text/event-stream")
        s.wait_connected()
    with connect(db_url) as c:
        _notify(c, ta, a["id"])
        row_a = inbox.since(c, a["id"], 0)[-1]
    for s in (sa1, sa2):  # every stream of the user
        ev = s.next_event()
        assert ev["event"] == "notification" and json.loads(ev["data"])["id"] == str(row_a["id"])
        assert ev["id"] == str(row_a["seq"])
        # The same event data as the web's own stream (opsboard.web.sse.event_data), the time in UTC.
        got, want = json.loads(ev["data"]), sse.event_data(row_a)
        assert datetime.fromisoformat(got.pop("created_at")) == datetime.fromisoformat(want.pop("created_at"))
        assert got == want
    with connect(db_url) as c:
        _notify(c, tb, b["id"])
        row_b = inbox.since(c, b["id"], 0)[-1]
        _notify(c, ta, a["id"])
        row_a2 = inbox.since(c, a["id"], row_a["seq"])[-1]
    # B's stream's first event is B's own row (A's went past it); A's next is A's second row, not B's.
    assert json.loads(sb.next_event()["data"])["id"] == str(row_b["id"])
    assert json.loads(sa1.next_event()["data"])["id"] == str(row_a2["id"])
    for s in (sa1, sa2, sb):
        s.close()

    # Last-Event-ID resumes: exactly the rows after it.
    again = _api(port, tok_a, **{"Last-Event-ID": str(row_a["seq"])})
    assert json.loads(again.next_event()["data"])["id"] == str(row_a2["id"])
    again.close()
    since = SSE(port, "/api/v1/inbox/stream?since=0", {"Authorization": f"Bearer {tok_a}"})
    assert [json.loads(since.next_event()["data"])["id"] for _ in range(2)] == [str(row_a["id"]), str(row_a2["id"])]
    since.close()


def test_no_credentials_or_bad_ones_get_401(db_url, streams):
    _proc, port = streams()
    for path, headers in (("/api/v1/inbox/stream", {}), ("/api/v1/inbox/stream", {"Authorization": "Bearer obu_nope"}),
                          ("/inbox/stream", {}), ("/inbox/stream", {"Cookie": "opsboard_session=forged.cookie.x"})):
        s = SSE(port, path, headers)
        assert s.r.status == 401, (path, headers)
        assert json.loads(s.r.read())["error"] == "unauthorized"
        s.close()
    bad = SSE(port, "/api/v1/inbox/stream?since=x", {"Authorization": "Bearer obu_nope"})
    assert bad.r.status == 401  # authentication first: nothing is said to a stranger about the cursor
    bad.close()


def test_dashboard_session_cookie_is_checked_as_the_web_checks_it(app, db_url, streams):
    """The web's own session cookie opens the page's stream; from another browser (flask-login's strong
    session protection) or after sign-out it opens nothing."""
    _proc, port = streams(OPSBOARD_STREAMS_ORIGINS="http://dash.test:8000")
    with connect(db_url) as c:
        t, u, _tok = _member(c, "streams-cookie")
    client = app.test_client()
    ua = {"User-Agent": "stream-test/1"}
    from tests.conftest import csrf_from
    token = csrf_from(client)
    r = client.post("/login", data={"email": u["email"], "password": PASSWORD, "csrf_token": token}, headers=ua)
    assert r.status_code == 302
    cookie = f"opsboard_session={client.get_cookie('opsboard_session').value}"
    s = SSE(port, "/inbox/stream", {"Cookie": cookie, "Origin": "http://dash.test:8000", **ua})
    assert s.r.status == 200
    assert s.r.getheader("Access-Control-Allow-Origin") == "http://dash.test:8000"
    assert s.r.getheader("Access-Control-Allow-Credentials") == "true"
    s.wait_connected()
    with connect(db_url) as c:
        _notify(c, t, u["id"])
    assert s.next_event()["event"] == "notification"
    s.close()
    other = SSE(port, "/inbox/stream", {"Cookie": cookie, "User-Agent": "another-browser/2",
                                        "Origin": "http://evil.test"})
    assert other.r.status == 401 and other.r.getheader("Access-Control-Allow-Origin") is None
    other.close()
    with connect(db_url) as c:
        auth.end_all_sessions(c, u["id"])
    gone = SSE(port, "/inbox/stream", {"Cookie": cookie, **ua})
    assert gone.r.status == 401
    gone.close()


def test_a_session_from_before_client_fingerprints_gets_one_on_the_redirect(app, db_url, streams):
    """The stream server ties a cookie to its browser by the fingerprint the web stores at sign-in
    (opsboard.web.context.client_fingerprint, not flask-login's internals).  A session signed in before
    sessions carried one opens no stream until the web's 307 to the stream server, which adds it for
    that session's own browser; another browser with the cookie still opens nothing."""
    from opsboard.web.context import CLIENT_KEY, client_fingerprint
    from tests.conftest import csrf_from

    _proc, port = streams()
    app.extensions["opsboard_config"] = app.extensions["opsboard_config"].replace(
        streams_url=f"http://127.0.0.1:{port}")
    with connect(db_url) as c:
        _t, u, _tok = _member(c, "streams-old-session")
    client = app.test_client()
    ua = {"User-Agent": "stream-test/3"}
    r = client.post("/login", data={"email": u["email"], "password": PASSWORD, "csrf_token": csrf_from(client)},
                    headers=ua)
    assert r.status_code == 302
    with client.session_transaction() as session:
        assert session[CLIENT_KEY] == client_fingerprint(None, "127.0.0.1", "stream-test/3")
        del session[CLIENT_KEY]  # as a session signed in before the fingerprint existed

    def cookie():
        return f"opsboard_session={client.get_cookie('opsboard_session').value}"

    old = SSE(port, "/inbox/stream", {"Cookie": cookie(), **ua})
    assert old.r.status == 401
    old.close()
    r = client.get("/inbox/stream", headers=ua)
    assert r.status_code == 307 and r.headers["Location"] == f"http://127.0.0.1:{port}/inbox/stream"
    s = SSE(port, "/inbox/stream", {"Cookie": cookie(), **ua})
    assert s.r.status == 200
    s.wait_connected()
    s.close()
    other = SSE(port, "/inbox/stream", {"Cookie": cookie(), "User-Agent": "another-browser/2"})
    assert other.r.status == 401
    other.close()


def test_past_the_cap_a_client_gets_503_with_retry_after(db_url, streams):
    _proc, port = streams(OPSBOARD_STREAMS_MAX="2")
    with connect(db_url) as c:
        _t, _u, tok = _member(c, "streams-cap")
        _t2, _u2, tok2 = _member(c, "streams-cap2")
    held = [_api(port, tok), _api(port, tok2)]
    for s in held:
        s.wait_connected()
    third = _api(port, tok)
    assert third.r.status == 503 and int(third.r.getheader("Retry-After")) > 0
    assert json.loads(third.r.read())["error"] == "streams_full"
    third.close()
    held[0].close()  # a slot frees when a client leaves (at once, not at its next heartbeat)
    wait_for(lambda: _health(port)["streams"] == 1, message="the left stream's slot to free")
    fourth = _api(port, tok)
    assert fourth.r.status == 200
    fourth.wait_connected()
    fourth.close()
    held[1].close()


def _health(port):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/healthz")
    body = json.loads(c.getresponse().read())
    c.close()
    return body


def test_sigterm_ends_open_streams_and_exits(db_url, streams):
    proc, port = streams()
    with connect(db_url) as c:
        _t, _u, tok = _member(c, "streams-term")
    open_streams = [_api(port, tok) for _ in range(3)]
    for s in open_streams:
        s.wait_connected()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0  # generous: it ends its streams at once, then closes
    for s in open_streams:
        assert s.next_event() is None  # the stream ended (not cut mid-event)
        s.close()


def test_bad_arguments_exit_2_with_one_line(db_url):
    import subprocess
    import sys

    from opsboard.config import ROOT
    from tests.conftest import worker_env
    for bind in ("nope", "127.0.0.1:99999", ":80"):
        r = subprocess.run([sys.executable, "-m", "opsboard.cli", "streams", "--bind", bind], cwd=ROOT,
                           env=worker_env(db_url), capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--bind" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "opsboard.cli", "streams"], cwd=ROOT, capture_output=True, text=True,
                       env=worker_env(db_url, OPSBOARD_ENV="production", OPSBOARD_SECRET_KEY="",
                                      OPSBOARD_STREAMS_URL="ftp://x"), timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "OPSBOARD_STREAMS_URL" in r.stderr


def _pids(port, want: int, tries: int = 200) -> dict[int, int]:
    """pid -> open streams of each stream server process behind ``port`` (a new connection lands on any
    of them: ask until ``want`` processes answered)."""
    seen: dict[int, int] = {}
    for _ in range(tries):
        h = _health(port)
        seen[h["pid"]] = h["streams"]
        if len(seen) >= want:
            break
    return seen


def test_several_processes_share_one_port_each_with_its_own_hub_and_cap(db_url, streams):
    """OPSBOARD_STREAMS_PROCESSES=2: two processes on one address (SO_REUSEPORT), each with its own LISTEN
    connection and its own cap; a notification reaches the user's streams on both; a process that dies is
    replaced; SIGTERM to the parent ends every stream and every process."""
    import os

    proc, port = streams(OPSBOARD_STREAMS_PROCESSES="2", OPSBOARD_STREAMS_MAX="2")
    first = _pids(port, 2)
    assert len(first) == 2 and proc.pid not in first, first
    with connect(db_url) as c:
        t, u, tok = _member(c, "streams-procs")
    # Streams until both processes are full (2 each): a full one answers 503, the next try may land on the other.
    held, refused = [], 0
    for _ in range(200):
        s = _api(port, tok)
        if s.r.status == 503:
            assert int(s.r.getheader("Retry-After")) > 0 and json.loads(s.r.read())["error"] == "streams_full"
            refused += 1
            s.close()
            if len(held) == 4:
                break
            continue
        assert s.r.status == 200
        s.wait_connected()
        held.append(s)
    assert len(held) == 4 and refused >= 1  # 2 + 2: each process holds its own cap
    assert sorted(_pids(port, 2).values()) == [2, 2]
    with connect(db_url) as c:
        _notify(c, t, u["id"])
        row = inbox.since(c, u["id"], 0)[-1]
    for s in held:  # both processes' hubs woke their streams of this user
        assert json.loads(s.next_event()["data"])["id"] == str(row["id"])

    # A process that dies is replaced on the same socket; its clients resume elsewhere.
    victim = next(iter(first))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in _pids(port, 2) and len(_pids(port, 2)) == 2,
             message="a new stream server process in place of the killed one")

    children = list(_pids(port, 2))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    for s in held:
        assert s.next_event() is None
        s.close()
    for pid in children:
        wait_for(lambda: not _alive(pid), message=f"stream server process {pid} to end")


def _alive(pid: int) -> bool:
    import os
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_processes_end_when_their_parent_is_killed(db_url, streams):
    """SIGKILL gives the parent no chance to stop its children: each asked the kernel for a SIGTERM when its
    parent dies (PR_SET_PDEATHSIG), so none is left holding the port."""
    proc, port = streams(OPSBOARD_STREAMS_PROCESSES="2")
    children = list(_pids(port, 2))
    assert len(children) == 2
    proc.kill()
    proc.wait(10)
    for pid in children:
        wait_for(lambda: not _alive(pid), message=f"stream server process {pid} to end after its parent")
