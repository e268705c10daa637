"""Inbox streams in a real browser (issue 27).

- Past the stream server's cap the page's stream gets 503 with Retry-After and the page polls: a new
  notification still appears.
- Against the demo's own configuration (gunicorn ``-w 2 --threads 4`` and the stream server, started by the
  demo's launch code), 20 live inbox tabs leave the dashboard answering: a page and /healthz load while
  the tabs stay open, and a new notification reaches every tab of its user.
"""
from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from opsboard import auth
from opsboard.notifications import fanout, preferences
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.browser.test_review_journey import _sign_in, _watch
from tests.conftest import connect, worker_env
from tests.integration.test_notifications import _notice  # declares test_notice.sent
from tests.support.streams import SECRET, start_streams, wait_listening

pytestmark = pytest.mark.browser


def _agent(c, slug: str, email: str):
    """A support agent (the test notice's policy asks for tickets.view) with no phone."""
    tenant = auth.ensure_tenant(c, slug)
    user = auth.create_user(c, email, PASSWORD, "support_agent", slug)
    preferences.set_profile(c, user["id"], phone=None)
    return tenant, user


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_past_the_cap_the_page_gets_503_and_polls(app, db_url, browser, shots, tmp_path):  # noqa: F811
    from werkzeug.serving import make_server
    import threading

    srv = make_server("127.0.0.1", 0, app, threaded=True)
    base = f"http://127.0.0.1:{srv.server_port}"
    proc, port = start_streams(db_url, tmp_path / "streams.log", OPSBOARD_STREAMS_MAX="0",
                               OPSBOARD_STREAMS_ORIGINS=base)
    app.extensions["opsboard_config"] = app.extensions["opsboard_config"].replace(
        streams_url=f"http://127.0.0.1:{port}")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with connect(db_url) as c:
            tenant, user = _agent(c, "poll-tenant", "poller@example.test")
        context = browser.new_context()
        page = context.new_page()
        problems = _watch(page)
        refused = []
        page.on("response", lambda r: refused.append(r) if r.url.startswith(f"http://127.0.0.1:{port}/") else None)
        _sign_in(page, base, "poller@example.test")
        page.goto(f"{base}/inbox/")
        page.locator('#live-status[data-polling="1"]').wait_for(timeout=15_000)
        assert [r.status for r in refused] and all(r.status == 503 for r in refused)
        assert int(refused[0].headers["retry-after"]) > 0
        with connect(db_url) as c:
            fanout.fan_out(c, _notice(c, tenant, [user["id"]])["id"])
        page.locator("#inbox-items li.new").wait_for(timeout=30_000)  # the poll brought it
        shots(page, "inbox-polling")
        assert [p for p in problems if "503" not in p] == []
        context.close()
    finally:
        srv.shutdown()
        proc.terminate()
        proc.wait(20)


def test_twenty_inbox_tabs_leave_the_demo_configuration_answering(db_url, browser, tmp_path):  # noqa: F811
    from opsboard.tools.demo import GUNICORN_THREADS, GUNICORN_WORKERS, start_web, stop_children

    port, streams_port = _free_port(), _free_port()
    env = worker_env(db_url, OPSBOARD_SECRET_KEY=SECRET)
    children = start_web(env, "127.0.0.1", port, streams_port, tmp_path)
    base = f"http://127.0.0.1:{port}"
    assert GUNICORN_WORKERS * GUNICORN_THREADS < 20  # more tabs than the web has threads
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline and all(c.poll() is None for c in children), \
                    (tmp_path / "web.log").read_text()[-2000:] + (tmp_path / "streams.log").read_text()[-2000:]
                time.sleep(0.2)
        wait_listening(streams_port)
        users = []
        with connect(db_url) as c:
            for i in range(4):  # 5 tabs each: the per-user cap
                users.append(_agent(c, "tabs-tenant", f"tabs{i}@example.test"))
        contexts, tabs = [], []
        for i in range(4):
            context = browser.new_context()
            contexts.append(context)
            first = context.new_page()
            _sign_in(first, base, f"tabs{i}@example.test")
            first.goto(f"{base}/inbox/")
            tabs.append(first)
            for _ in range(4):
                page = context.new_page()
                page.goto(f"{base}/inbox/")
                tabs.append(page)
        for page in tabs:
            page.locator('#live-status[data-live="1"]').wait_for(timeout=60_000)
        # Every tab holds its stream: now the dashboard must still answer.
        started = time.monotonic()
        page = contexts[0].new_page()
        response = page.goto(f"{base}/inbox/preferences")
        page_s = time.monotonic() - started
        assert response.status == 200 and page.locator("#preferences-link, form").count() > 0
        started = time.monotonic()
        with urllib.request.urlopen(base + "/healthz", timeout=30) as r:
            assert r.status == 200
        health_s = time.monotonic() - started
        print(f"\n20 live inbox tabs: a dashboard page in {page_s * 1000:.0f} ms, /healthz in {health_s * 1000:.0f} ms")
        health = urllib.request.urlopen(f"http://127.0.0.1:{streams_port}/healthz", timeout=10).read()
        assert b'"streams": 20' in health
        tenant, user = users[0]
        with connect(db_url) as c:
            fanout.fan_out(c, _notice(c, tenant, [user["id"]])["id"])
        for page in tabs[:5]:
            page.locator("#inbox-items li.new").wait_for(timeout=30_000)
        for page in tabs:
            assert page.locator('#live-status[data-live="1"]').count() == 1  # still live, not polling
        for context in contexts:
            context.close()
    finally:
        stop_children(children, grace=20)
