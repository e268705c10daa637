"""Operator staff hold and release a queue in a real browser (issue 28): the Pause
link on queue health, a reason, the held row with who/why, Resume with a reason;
the critical queue asks for the confirmation box first."""
from __future__ import annotations

import pytest

from opsboard import auth, jobqueue
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def test_ops_pauses_and_resumes_a_queue(app, server, browser, shots):  # noqa: F811
    url = app.extensions["test_db_url"]
    with connect(url) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        acme = seed.tenant(c, "acme")
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.record", {"key": str(i)}, acme) for i in range(3)])
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)

    page.goto(f"{server}/queues/")
    page.click('[data-queue="default"] a[data-pause="queue:default"]')          # click 1
    page.wait_for_url("**/pauses/new**")
    page.fill("#pause-form textarea[name=reason]", "database failover in progress")
    shots(page, "pause-form")
    page.click("#pause-form button[type=submit]")                               # click 2
    page.wait_for_url("**/queues/")
    row = page.locator('#pauses-table tr[data-paused-target="default"]')
    assert "database failover in progress" in row.inner_text()
    assert "ops@example.test" in row.inner_text()
    assert page.locator('[data-paused="queue:default"]').count() >= 1
    shots(page, "paused")
    with connect(url) as c:
        assert c.execute("SELECT count(*) AS n FROM pauses").fetchone()["n"] == 1
        assert jobqueue.claim_batch(c, "default", "w", 10, 30) == []

    # The critical queue: the browser will not submit without the confirmation box.
    page.click('[data-queue="critical"] a[data-pause="queue:critical"]')
    page.wait_for_url("**/pauses/new**")
    page.fill("#pause-form textarea[name=reason]", "drill")
    page.click("#pause-form button[type=submit]")
    assert "/pauses/new" in page.url
    page.check("#pause-form input[name=confirm]")
    page.click("#pause-form button[type=submit]")
    page.wait_for_url("**/queues/")
    assert page.locator('#pauses-table tr[data-paused-target="critical"]').count() == 1

    for target in ("default", "critical"):
        form = page.locator(f'#pauses-table tr[data-paused-target="{target}"] form')
        form.locator("input[name=reason]").fill("incident over")
        form.locator("button[type=submit]").click()
        page.wait_for_url("**/queues/")
    assert "Nothing is paused." in page.locator("#pauses").inner_text()
    shots(page, "resumed")

    with connect(url) as c:
        assert c.execute("SELECT count(*) AS n FROM pauses").fetchone()["n"] == 0
        assert len(jobqueue.claim_batch(c, "default", "w", 10, 30)) == 3
    # A live concurrency change: the type's limit, with the old value shown, audited.
    page.click('a[data-limit="type:test.record"]')
    page.wait_for_url("**/pauses/limit**")
    page.fill("#limit-form input[name=value]", "2")
    page.fill("#limit-form textarea[name=reason]", "database is hot")
    page.click("#limit-form button[type=submit]")
    page.wait_for_url("**/queues/")
    assert page.locator('a[data-limit="type:test.record"]').inner_text().strip() == "limit 2"
    shots(page, "limit")
    # A queue's slots per worker, live: the old value (each worker's own) shown, then the new one.
    page.click('a[data-slots="bulk"]')
    page.wait_for_url("**/pauses/limit**")
    assert page.locator("[data-current-limit]").get_attribute("data-current-limit") == ""
    page.fill("#limit-form input[name=value]", "6")
    page.fill("#limit-form textarea[name=reason]", "reports pile up")
    page.click("#limit-form button[type=submit]")
    page.wait_for_url("**/queues/")
    assert page.locator('a[data-slots="bulk"]').inner_text().strip() == "6 slots per worker"
    shots(page, "slots")
    with connect(url) as c:
        actions = [r["action"] for r in c.execute(
            "SELECT action FROM audit_log WHERE action IN ('pause', 'resume', 'limit.set') ORDER BY at, id")]
        assert actions == ["pause", "pause", "resume", "resume", "limit.set", "limit.set"]
        assert c.execute("SELECT value FROM limit_overrides WHERE target = 'test.record'").fetchone()["value"] == 2
        assert c.execute("SELECT value FROM limit_overrides WHERE kind = 'queue' AND target = 'bulk'"
                         ).fetchone()["value"] == 6
    assert problems == []
