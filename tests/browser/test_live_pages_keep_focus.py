"""Pages that refresh themselves keep the keyboard user's place (issue 44).

On every self-refreshing page: tab to a control inside the live region, wait
through two refreshes of that region, check focus is still on the control,
press Enter, and the control's action happens.  The refresh is a morph
(htmx + idiomorph): only the values that changed are touched, so the focused
element, the scroll position and open <details> stay as they were.
"""
from __future__ import annotations

from datetime import timedelta

import pytest

from opsboard import auth
from tests.browser.test_ops_journey import PASSWORD, browser, server  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser

# A refresh of the live region: counted on every settle of an element with that id.
COUNT_SWAPS = """(id) => {
  window.__swaps = window.__swaps || {};
  window.__swaps[id] = 0;
  document.addEventListener('htmx:afterSettle', (e) => {
    const el = e.target;
    if (el && (el.id === id || (el.closest && el.closest('#' + id)))) { window.__swaps[id] += 1; }
  });
}"""


@pytest.fixture
def world(app):
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        acme = seed.tenant(c, "acme")
        now = seed.db_now(c)
        seed.jobs(c, acme, 4, "test.record", {"key": "x"})
        dead = seed.jobs(c, acme, 1, "test.permanent")
        seed.kill(c, dead, "http_410", at=now - timedelta(minutes=1))
        from opsboard.alerts import AlertService
        AlertService().run_once(c)  # ready jobs and no worker: an open alert
        assert c.execute("SELECT count(*) AS n FROM alerts WHERE closed_at IS NULL").fetchone()["n"] >= 1
        running = seed.jobs(c, acme, 1, "test.record", {"key": "r"})
        seed.worker(c, "host-1:100:w1", {"default": 4})
        seed.run(c, running, "host-1:100:w1")
        from opsboard.deliveries import webhooks
        webhooks.create_endpoint(c, acme, "https://hooks.example.com/acme", ("*",))
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)
    return {"acme": acme}


def _login(page, server):  # noqa: F811
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)


def _tab_to(page, selector: str, limit: int = 300) -> None:
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => !!document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


# page, live region id, the control, a check that its action happened
PAGES = [
    ("/queues/", "queue-health", 'a[data-limit="type:test.record"]',
     lambda page: page.wait_for_url("**/pauses/limit**")),
    ("/tenants/", "tenant-backlog", 'tr[data-tenant="acme"] a',
     lambda page: page.wait_for_url("**/tenants/*-*")),
    ("/workers/", "worker-list", 'details[data-keep-open] > summary',
     lambda page: page.wait_for_function("() => document.querySelector('details[data-keep-open]').open")),
    ("/workers/", "worker-list", 'a[data-controls]',
     lambda page: page.wait_for_url("**/workers/*/controls")),
    ("/alerts/", "alert-list", 'tr[data-alert-id] a',
     lambda page: page.wait_for_url("**/alerts/*-*")),
    ("/deliveries/", "delivery-breakers", 'a[id^="breaker-endpoint-"]',
     lambda page: page.wait_for_url("**/webhooks/*-*")),
]


@pytest.mark.parametrize("path,region,control,happened", PAGES, ids=[f"{p[1]}-{p[2]}" for p in PAGES])
def test_focus_survives_two_refreshes(app, server, browser, world, path, region, control, happened):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    _login(page, server)
    page.goto(f"{server}{path}")
    page.wait_for_selector(f"#{region}")
    page.evaluate(COUNT_SWAPS, region)
    _tab_to(page, control)
    # The very element stays: a refresh that rebuilt it (and put focus back by hand) would lose this mark.
    page.evaluate("() => { document.activeElement.__kept = 'yes'; }")
    page.wait_for_function("(r) => window.__swaps[r] >= 2", arg=region, timeout=45_000)
    assert page.evaluate("(s) => document.activeElement.matches(s)", control), \
        f"focus left {control} after {region} refreshed"
    assert page.evaluate("() => document.activeElement.__kept") == "yes", \
        f"{control} was rebuilt by the refresh of {region}, not kept"
    page.keyboard.press("Enter")
    happened(page)
    assert problems == []
