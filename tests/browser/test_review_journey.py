"""The outside review's dashboard findings in a real browser (issue 15):
acknowledging an alert updates the page at once, an opened expander survives
refreshes, a tenant-scoped user's navigation holds only pages they may open,
the charts render with axes, and the dark theme follows the system.

Same setup as test_ops_journey (Debian's chromium, a real threaded server);
screenshots go to test-output/<test name>/.
"""
from __future__ import annotations

from datetime import timedelta

import pytest

from opsboard import auth
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots, world  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def _watch(page) -> list[str]:
    """Script errors, CSP violations and failed requests seen by the page."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    return problems


#: Resolves at the next htmx swap-and-settle of the page (or fails after 15 s).
NEXT_SETTLE = """() => new Promise((resolve, reject) => {
    document.addEventListener('htmx:afterSettle', () => resolve(true), {once: true});
    setTimeout(() => reject(new Error('no htmx refresh within 15 s')), 15000);
})"""


def _sign_in(page, server, email):
    page.goto(f"{server}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)


def test_acknowledging_an_alert_updates_the_page(app, server, browser, world, shots):
    with connect(app.extensions["test_db_url"]) as c:
        alert_id = c.execute("SELECT id FROM alerts WHERE closed_at IS NULL ORDER BY opened_at LIMIT 1"
                             ).fetchone()["id"]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = _watch(page)
    _sign_in(page, server, "ops@example.test")
    page.goto(f"{server}/alerts/{alert_id}")
    page.locator("#alert-banner .banner").wait_for()
    before = int(page.locator("#alert-banner .banner").get_attribute("data-open-alerts"))
    assert "not yet" in page.locator("#alert-page").inner_text()
    shots(page, "alert-before-ack")

    page.fill("#alert-page textarea[name=reason]", "restarting the worker pool")
    page.click("#alert-page button[type=submit]")
    # The page itself changes: state, acknowledgement, history, form gone, banner count down.
    page.wait_for_function("() => document.querySelector('#alert-page').innerText.includes('open, acknowledged')",
                           timeout=10_000)
    text = page.locator("#alert-page").inner_text()
    assert "restarting the worker pool" in text and "not yet" not in text
    assert page.locator("#alert-page textarea[name=reason]").count() == 0
    assert page.locator("#alert-page table code", has_text="alert.ack").count() == 1
    page.wait_for_function(
        "n => { const b = document.querySelector('#alert-banner .banner');"
        " return (b ? Number(b.dataset.openAlerts) : 0) === n - 1; }", arg=before, timeout=10_000)
    assert page.url.endswith(f"/alerts/{alert_id}")  # no navigation: updated in place
    shots(page, "alert-after-ack")
    assert problems == [], problems
    context.close()


def test_opened_expander_survives_two_refreshes(app, server, browser, world, shots):
    with connect(app.extensions["test_db_url"]) as c:
        acme = c.execute("SELECT id FROM tenants WHERE slug = 'acme'").fetchone()["id"]
        seed.worker(c, "host-1:100:abc", {"default": 4})
        seed.run(c, seed.jobs(c, acme, 2), "host-1:100:abc")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = _watch(page)
    _sign_in(page, server, "ops@example.test")
    page.goto(f"{server}/workers/")
    details = page.locator("#worker-list details[data-keep-open]").first
    details.locator("summary").click()
    assert details.evaluate("d => d.open")
    for n in (1, 2):  # the list is swapped every 5 seconds
        page.evaluate(NEXT_SETTLE)
        fresh = page.locator("#worker-list details[data-keep-open]").first
        assert fresh.evaluate("d => d.open"), f"collapsed after refresh {n}"
    shots(page, "workers-expander-open")
    # Closed by the user, it stays closed.
    page.locator("#worker-list details[data-keep-open] summary").first.click()
    page.evaluate(NEXT_SETTLE)
    assert not page.locator("#worker-list details[data-keep-open]").first.evaluate("d => d.open")
    assert problems == [], problems
    context.close()


def test_tenant_scoped_users_navigation_opens_every_link(app, server, browser, world, shots):
    with connect(app.extensions["test_db_url"]) as c:
        auth.create_user(c, "acme-ops@example.test", PASSWORD, "ops", "acme")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = _watch(page)
    _sign_in(page, server, "acme-ops@example.test")
    labels = page.locator(".mainnav a").all_inner_texts()
    assert "Workers" not in labels and "Jobs" in labels
    hrefs = [a.get_attribute("href") for a in page.locator(".mainnav a").all()]
    for href in hrefs:
        response = page.goto(server + href)
        assert response.status == 200, href
    shots(page, "tenant-ops-nav")
    assert problems == [], problems

    # A support agent lands on the ticket queue, the one page of the navigation they may open.
    with connect(app.extensions["test_db_url"]) as c:
        auth.create_user(c, "agent@example.test", PASSWORD, "support_agent", "acme")
    page2 = browser.new_context().new_page()
    _sign_in(page2, server, "agent@example.test")
    assert page2.url.endswith("/tickets/")
    assert [a.get_attribute("href") for a in page2.locator(".mainnav a").all()] == ["/tickets/"]
    shots(page2, "support-agent-landing")
    context.close()


def test_charts_render_with_axes_and_the_dark_theme(app, server, browser, world, shots):
    from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
    with connect(app.extensions["test_db_url"]) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        for m in range(0, 60, 3):
            hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
            hist[bucket_index(30 + m * 5)] += 20
            hist[bucket_index(900)] += 1
            c.execute("""INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, duration_hist)
                         VALUES (%s, 'w1', 'default', 'email.send', %s, %s, %s, %s)""",
                      (now - timedelta(minutes=m), 10 + m % 7, m % 4, int(m % 3 == 0), hist))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    problems = _watch(page)
    _sign_in(page, server, "ops@example.test")
    page.goto(f"{server}/queues/")
    chart = page.locator('[data-charts="queues"] figure.chart').filter(has=page.locator("svg")).first
    chart.wait_for()
    assert chart.locator('[data-axis="x"] text').count() >= 4
    assert chart.locator('[data-axis="y"] text').count() == 3
    assert chart.locator("polyline.line").count() == 2
    assert chart.locator("ul.legend li").all_inner_texts() == ["processed / min", "failed / min"]
    assert "UTC" in chart.locator(".hover rect title").first.text_content()
    box = chart.locator("svg").bounding_box()
    assert box and box["width"] > 250 and box["height"] > 80
    chart.scroll_into_view_if_needed()
    shots(page, "charts-1h")
    page.goto(f"{server}/queues/?range=24h")
    page.locator('[data-range="24h"]').wait_for()
    shots(page, "charts-24h")
    acme = world["dead"][0]
    with connect(app.extensions["test_db_url"]) as c:
        tid = c.execute("SELECT tenant_id FROM jobs WHERE id = %s", (acme,)).fetchone()["tenant_id"]
    page.goto(f"{server}/tenants/{tid}")
    assert page.locator('[data-charts="tenant"] [data-axis="x"]').count() == 2
    shots(page, "tenant-charts")
    assert problems == [], problems
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    context.close()

    dark = browser.new_context(viewport={"width": 1280, "height": 1000}, color_scheme="dark")
    page = dark.new_page()
    _sign_in(page, server, "ops@example.test")
    page.goto(f"{server}/queues/")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != light
    shots(page, "charts-dark")
    dark.close()
