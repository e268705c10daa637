"""The dead-letter page: groups by (type, error code), counts, newest failure, links."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest

from opsboard import dashboard, db as dbmod, jobqueue
from opsboard.auth import TenantScope
from tests.conftest import connect
from tests.support import dashboard as seed

ALL = TenantScope(all=True)


def _groups(html: str) -> dict[tuple[str, str], int]:
    return {(t, c): int(n) for t, c, n in re.findall(
        r'<tr data-type="([^"]+)" data-error-code="([^"]*)" data-open="(\d+)">', html)}


@pytest.fixture
def seeded(app):
    with connect(app.extensions["test_db_url"]) as c:
        acme, globex = seed.tenant(c, "acme"), seed.tenant(c, "globex")
        now = seed.db_now(c)
        hooks = seed.jobs(c, acme, 40, "test.permanent") + seed.jobs(c, globex, 2, "test.permanent")
        seed.kill(c, hooks[:41], "http_410", at=now - timedelta(hours=2))
        seed.kill(c, hooks[41:], "http_410", at=now - timedelta(minutes=5))
        mails = seed.jobs(c, acme, 3, "test.raise")
        seed.kill(c, mails, "smtp_timeout", at=now - timedelta(minutes=1))
        seed.jobs(c, acme, 5)  # pending: not dead letters
    return {"acme": acme, "globex": globex, "hooks": hooks, "mails": mails, "newest_hook": now - timedelta(minutes=5)}


def test_groups_with_counts_and_newest_failure(client, login_as, seeded):
    login_as("ops")
    r = client.get("/dead/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert _groups(html) == {("test.permanent", "http_410"): 42, ("test.raise", "smtp_timeout"): 3}
    assert "<strong>42 ×</strong>" in html and '<code dir="ltr">http_410</code> on <code dir="ltr">test.permanent</code>' in html
    assert 'data-total-open="45"' in html
    # Newest failure first: smtp_timeout (1 min ago) above http_410 (5 min ago).
    assert html.index('data-error-code="smtp_timeout"') < html.index('data-error-code="http_410"')
    assert seeded["newest_hook"].strftime("%Y-%m-%d %H:%M:%S") in html
    # Each group links to the job list filtered to it, and offers replay all.
    link = "/jobs/?status=dead&amp;type=test.permanent&amp;error_code=http_410"
    assert link in html
    assert "/jobs/replay-many/confirm?type=test.permanent&amp;error_code=http_410" in html
    listed = client.get(link.replace("&amp;", "&")).get_data(as_text=True)
    assert len(re.findall(r'data-job-id="', listed)) == 42
    assert "Replay all matching dead jobs" in listed


def test_filter_by_queue_and_tenant(client, login_as, seeded):
    login_as("ops")
    html = client.get(f"/dead/_groups?tenant_id={seeded['globex']}", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert _groups(html) == {("test.permanent", "http_410"): 2}
    assert f"tenant_id={seeded['globex']}" in html  # links keep the filter
    assert _groups(client.get("/dead/?queue=bulk").get_data(as_text=True)) == {}


def test_handled_dead_letters_leave_the_open_count(client, login_as, app, seeded):
    login_as("ops")
    with connect(app.extensions["test_db_url"]) as c:
        from opsboard import audit
        jobqueue.replay(c, seeded["mails"][0], audit.Actor("ops@x"), "retry it", None)
        dashboard.resolve(c, seeded["mails"][1], "ignored", audit.Actor("ops@x"), "test mail", None, scope=ALL)
    html = client.get("/dead/").get_data(as_text=True)
    assert _groups(html)[("test.raise", "smtp_timeout")] == 1
    with connect(app.extensions["test_db_url"]) as c:
        dashboard.resolve(c, seeded["mails"][2], "resolved", audit.Actor("ops@x"), "sent by hand", None, scope=ALL)
    html = client.get("/dead/").get_data(as_text=True)
    assert ("test.raise", "smtp_timeout") not in _groups(html)
    html = client.get("/dead/?show=all").get_data(as_text=True)
    assert _groups(html)[("test.raise", "smtp_timeout")] == 0


def test_tenant_scoped_user_sees_their_dead_letters_only(client, login_as, seeded):
    login_as("ops", tenant="globex", operator=False)
    html = client.get("/dead/").get_data(as_text=True)
    assert _groups(html) == {("test.permanent", "http_410"): 2}


def test_dead_count_matches_what_bulk_replay_selects(conn):
    """The confirmation's count is what bulk replay selects (one query serves both)."""
    t1, t2 = seed.tenant(conn), seed.tenant(conn)
    a = seed.jobs(conn, t1, 3, "test.permanent")
    b = seed.jobs(conn, t2, 2, "test.raise")
    seed.kill(conn, a, "http_410")
    seed.kill(conn, b, "http_500")
    from opsboard import audit
    jobqueue.replay(conn, a[0], audit.Actor("x"), "r", None)
    for f in [jobqueue.DeadFilter(), jobqueue.DeadFilter(open_only=True), jobqueue.DeadFilter(type="test.permanent"),
              jobqueue.DeadFilter(tenant_id=t2), jobqueue.DeadFilter(error_code="http_410", open_only=True),
              jobqueue.DeadFilter(queue="bulk")]:
        selected = dbmod.all_rows(conn, "job_dead_select", {
            **ALL.params, "type": f.type, "queue": f.queue, "tenant_id": f.tenant_id, "error_code": f.error_code,
            "since": f.since, "until": f.until, "open_only": f.open_only, "limit": 1000})
        assert dashboard.count_dead(conn, ALL, f) == len(selected), f


def test_groups_count_the_newest_dead_jobs_and_say_how_far_back(client, login_as, seeded, monkeypatch):
    """Bounded at any size: the groups count the newest DEAD_WINDOW dead jobs (in the scope and
    filters), and the page says so and links to the job list for the older ones."""
    login_as("ops")
    html = client.get("/dead/").get_data(as_text=True)
    assert "data-dead-window" not in html  # 45 dead jobs: all counted
    monkeypatch.setattr(dashboard, "DEAD_WINDOW", 4)
    html = client.get("/dead/").get_data(as_text=True)
    # The 4 newest: the 3 mails (1 min ago) and globex's newest hook (5 min ago).
    assert _groups(html) == {("test.raise", "smtp_timeout"): 3, ("test.permanent", "http_410"): 1}
    assert 'data-dead-window="4"' in html and "status=dead" in html


def test_the_window_follows_the_tenant_filter(conn):
    t1, t2 = seed.tenant(conn), seed.tenant(conn)
    now = seed.db_now(conn)
    old = seed.jobs(conn, t1, 3, "test.permanent")
    seed.kill(conn, old, "http_410", at=now - timedelta(hours=1))
    seed.kill(conn, seed.jobs(conn, t2, 5, "test.raise"), "http_500", at=now)
    found = dashboard.dead_letter_groups(conn, ALL, tenant_id=t1, window=2)
    assert [(g["type"], g["total"]) for g in found.groups] == [("test.permanent", 2)] and found.full
    found = dashboard.dead_letter_groups(conn, TenantScope(all=False, ids=(t1,)), window=5)
    assert [(g["type"], g["total"]) for g in found.groups] == [("test.permanent", 3)] and not found.full
