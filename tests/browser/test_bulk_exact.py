"""Issue 44, "A bulk action confirmed for N jobs acts on exactly those N", in Debian's Chromium: from
Queue health, Cancel waiting… counts N; jobs arrive between the preview and the click; exactly the N
counted are cancelled and the newcomers still wait.  The same for a bulk replay of dead jobs that die
after the preview."""
from __future__ import annotations

import pytest

from tests.browser.test_operator_actions import _sign_in, ops  # noqa: F401  (fixture)
from tests.browser.test_ops_journey import browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def _statuses(app, ids) -> dict:
    with connect(app.extensions["test_db_url"]) as c:
        return {r["id"]: r["status"] for r in c.execute("SELECT id, status FROM jobs WHERE id = ANY(%s)", (list(ids),))}


def test_bulk_cancel_acts_on_exactly_the_previewed_jobs(app, server, browser, ops):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        first = seed.jobs(c, ops, 5, "test.record", {"key": "a", "ms": 1})
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/jobs/cancel-many/confirm?type=test.record&queue=default")
    confirm = page.locator("#cancel-many")
    assert confirm.get_attribute("data-acts-on") == "5"
    with connect(app.extensions["test_db_url"]) as c:   # arrive while the operator reads the count
        later = seed.jobs(c, ops, 2, "test.record", {"key": "b", "ms": 1})
    confirm.locator("textarea[name=reason]").fill("bad batch")
    confirm.locator("form[method=post] button[type=submit]").click()
    result = page.locator("#cancel-many-result .result.ok")
    result.wait_for()
    assert result.get_attribute("data-cancelled") == "5"
    assert set(_statuses(app, first).values()) == {"cancelled"}
    assert set(_statuses(app, later).values()) == {"pending"}
    assert problems == []


def test_bulk_replay_acts_on_exactly_the_previewed_dead_jobs(app, server, browser, ops):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        jobs = seed.jobs(c, ops, 5, "test.permanent", {"hook_id": 7})
        seed.kill(c, jobs[2:])
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/jobs/?status=dead&type=test.permanent")
    page.locator("button", has_text="Replay all matching").click()
    confirm = page.locator("#bulk-panel .confirm")
    confirm.wait_for()
    assert confirm.get_attribute("data-acts-on") == "3"
    with connect(app.extensions["test_db_url"]) as c:   # two older jobs (lower ids) die after the preview
        seed.kill(c, jobs[:2])
    confirm.locator("textarea[name=reason]").fill("endpoint fixed")
    confirm.locator("form[method=post] button[type=submit]").click()
    result = page.locator("#bulk-result .result.ok")
    result.wait_for()
    assert result.get_attribute("data-replayed") == "3"
    with connect(app.extensions["test_db_url"]) as c:
        replayed = {r["replay_of"] for r in c.execute("SELECT replay_of FROM jobs WHERE replay_of IS NOT NULL")}
    assert replayed == set(jobs[2:])
    assert problems == []
