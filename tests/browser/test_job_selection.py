"""Issue 44, "Selection and actions", in Debian's Chromium: tick rows on the job list and replay,
cancel or discard exactly those (select-all ticks only the rows shown), run a scheduled job now, and
preview a purge of old dead jobs, then purge."""
from __future__ import annotations

from datetime import timedelta

import pytest

from tests.browser.test_operator_actions import _sign_in, ops  # noqa: F401  (fixture)
from tests.browser.test_ops_journey import browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def _statuses(app, ids) -> dict:
    with connect(app.extensions["test_db_url"]) as c:
        return {r["id"]: r["status"] for r in c.execute("SELECT id, status FROM jobs WHERE id = ANY(%s)", (list(ids),))}


def _act(page, action_label: str, reason: str):
    page.locator("#job-selection button", has_text=action_label).click()
    confirm = page.locator("#selection-confirm")
    confirm.wait_for()
    count = confirm.get_attribute("data-count")
    confirm.locator("textarea[name=reason]").fill(reason)
    confirm.locator("button[type=submit]").click()
    result = page.locator("#selection-result .result.ok")
    result.wait_for()
    return count, result.get_attribute("data-done")


def test_ticked_rows_are_cancelled_and_select_all_means_the_rows_shown(app, server, browser, ops):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        jobs = seed.jobs(c, ops, 4, "test.record", {"key": "a", "ms": 1})
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/jobs/?status=pending&type=test.record")
    for j in jobs[:2]:
        page.locator(f'tr[data-job-id="{j}"] input[name=ids]').check()
    assert page.locator("[data-selected-count]").inner_text() == "2"
    assert _act(page, "Cancel selected", "not needed") == ("2", "2")
    assert _statuses(app, jobs) == {**{j: "cancelled" for j in jobs[:2]}, **{j: "pending" for j in jobs[2:]}}
    page.goto(f"{server}/jobs/?status=pending&type=test.record")
    page.locator("input[data-select-all]").check()
    assert page.locator("input[name=ids]:checked").count() == 2
    with connect(app.extensions["test_db_url"]) as c:   # not shown: never part of "all"
        unseen = seed.jobs(c, ops, 1, "test.record", {"key": "b", "ms": 1})
    assert _act(page, "Cancel selected", "the rest") == ("2", "2")
    assert _statuses(app, unseen) == {unseen[0]: "pending"}
    assert problems == []


def test_ticked_dead_jobs_are_replayed_or_deleted_and_a_scheduled_one_runs_now(app, server, browser, ops):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        dead = seed.jobs(c, ops, 3, "test.permanent", {"hook_id": 7})
        seed.kill(c, dead)
        [later] = seed.jobs(c, ops, 1, "test.record", {"key": "s", "ms": 1}, run_at=seed.db_now(c) + timedelta(hours=2))
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/jobs/?status=dead&type=test.permanent")
    page.locator(f'tr[data-job-id="{dead[0]}"] input[name=ids]').check()
    assert _act(page, "Replay selected", "fixed") == ("1", "1")
    page.goto(f"{server}/jobs/?status=dead&type=test.permanent")
    page.locator(f'tr[data-job-id="{dead[1]}"] input[name=ids]').check()
    assert _act(page, "Delete selected", "noise") == ("1", "1")
    assert set(_statuses(app, dead)) == {dead[0], dead[2]}
    page.goto(f"{server}/jobs/{later}")
    form = page.locator("form[data-run-now]")
    form.locator("textarea[name=reason]").fill("customer waiting")
    form.locator("button[type=submit]").click()
    page.locator("#run-now-result .result.ok").wait_for()
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT available_at <= now() AS due FROM jobs WHERE id = %s", (later,)).fetchone()["due"]
    assert problems == []


def test_purge_preview_then_purge(app, server, browser, ops):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        jobs = seed.jobs(c, ops, 3, "test.permanent", {"hook_id": 7})
        seed.kill(c, jobs[:2], at=seed.db_now(c) - timedelta(days=30))
        seed.kill(c, jobs[2:])
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/dead/")
    page.locator("a[data-purge-link]").click()
    page.locator("input[name=older_than_days]").fill("7")
    page.locator("form[data-bulk-filter] button[type=submit]").click()
    confirm = page.locator("#purge")
    confirm.wait_for()
    assert confirm.get_attribute("data-acts-on") == "2"
    assert confirm.locator("[data-dead-retention]").count() == 1
    confirm.locator("textarea[name=reason]").fill("old noise")
    confirm.locator("form[method=post] button[type=submit]").click()
    result = page.locator("#purge-result .result.ok")
    result.wait_for()
    assert result.get_attribute("data-done") == "2"
    assert set(_statuses(app, jobs)) == {jobs[2]}
    assert problems == []
