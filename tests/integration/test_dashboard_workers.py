"""The workers page: live workers, what they run, stale ones flagged, a partial every 5 s."""
from __future__ import annotations

import re
from datetime import timedelta

from opsboard import alerts, dashboard
from opsboard.auth import TenantScope
from opsboard.config import WORKER_LIVE_SECONDS
from tests.conftest import connect
from tests.support import dashboard as seed


def test_workers_page_and_partial(client, login_as, app):
    with connect(app.extensions["test_db_url"]) as c:
        now = seed.db_now(c)
        seed.worker(c, "web-1:11:aaa", {"critical": 2, "default": 8}, leader=True, hostname="web-1", pid=11)
        seed.worker(c, "web-2:22:bbb", {"bulk": 2}, seen=now - timedelta(seconds=95), hostname="web-2", pid=22)
        t = seed.tenant(c, "acme")
        ids = seed.jobs(c, t, 3)
        seed.run(c, ids, "web-1:11:aaa")
    login_as("ops")
    r = client.get("/workers/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert 'data-workers="2"' in html and 'data-stale="1"' in html
    assert 'hx-get="/workers/_list" hx-trigger="every 5s"' in html
    row1 = re.search(r'<tr class="" data-worker-id="web-1:11:aaa" data-stale="false">(.*?)</tr>', html, re.S).group(1)
    assert "web-1 · 11" in row1 and "critical 2" in row1 and "default 8" in row1 and "leader" in row1
    assert '<td class="num">3' in row1 and all(f"/jobs/{i}" in row1 for i in ids)
    row2 = re.search(r'data-worker-id="web-2:22:bbb" data-stale="true">(.*?)</tr>', html, re.S).group(1)
    assert "stale" in row2 and "bulk 2" in row2 and "leader" not in row2
    part = client.get("/workers/_list", headers={"HX-Request": "true"})
    assert part.status_code == 200 and "<html" not in part.get_data(as_text=True)
    assert 'data-workers="2"' in part.get_data(as_text=True)


def test_stale_once_silent_past_the_live_window(conn):
    # One definition of "live" (config.WORKER_LIVE_SECONDS) for this page, the
    # no_worker alert and the opsboard_workers gauge.
    now = seed.db_now(conn)
    seed.worker(conn, "w-fresh", {"default": 1}, seen=now - timedelta(seconds=WORKER_LIVE_SECONDS - 1))
    seed.worker(conn, "w-stale", {"default": 1}, seen=now - timedelta(seconds=WORKER_LIVE_SECONDS + 1))
    rows = {w["id"]: w for w in dashboard.list_workers(conn, TenantScope(all=True), now=now)}
    assert rows["w-fresh"]["stale"] is False and rows["w-stale"]["stale"] is True
    assert round(rows["w-stale"]["seen_ago"]) == WORKER_LIVE_SECONDS + 1
    assert dashboard.WORKER_STALE_SECONDS == alerts.AlertConfig().worker_silence == WORKER_LIVE_SECONDS


def test_running_jobs_respect_the_scope(conn):
    t1, t2 = seed.tenant(conn), seed.tenant(conn)
    seed.worker(conn, "w1", {"default": 4})
    mine, theirs = seed.jobs(conn, t1, 2), seed.jobs(conn, t2, 1)
    seed.run(conn, mine + theirs, "w1")
    [w] = dashboard.list_workers(conn, TenantScope(all=False, ids=(t1,)))
    assert w["running_count"] == 2 and sorted(j["id"] for j in w["running"]) == sorted(str(i) for i in mine)


def test_workers_page_needs_workers_view(client, login_as):
    login_as("template_author")
    assert client.get("/workers/").status_code == 403
    assert client.get("/workers/_list").status_code == 403
