"""The queue's history in a real browser (issue 44): the 7-day range of the queue page and of a job
type's page renders its charts (axes from the data, a day on each time label), in en and in fa.

Same setup as test_ops_journey (Debian's chromium, a real threaded server); screenshots go to
test-output/<test name>/.
"""
from __future__ import annotations

import re
from datetime import timedelta


import pytest

from opsboard import auth, history
from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots, world  # noqa: F401  (fixtures)
from tests.browser.test_review_journey import _sign_in, _watch
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def _week_of_stats(c) -> None:
    """A week of email.send statistics, one row an hour, slower in the afternoon; then the rollup."""
    now = seed.db_now(c).replace(second=0, microsecond=0)
    for h in range(0, 7 * 24):
        hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
        hist[bucket_index(30 + (h % 24) * 20)] += 40
        c.execute("""INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, duration_hist)
                     VALUES (%s, 'w1', 'default', 'email.send', %s, %s, 0, %s)""",
                  (now - timedelta(hours=h), 30 + h % 11, h % 4, hist))
    history.roll_up(c, now, since_days=7)


def test_the_week_renders_on_the_queue_page_and_a_type_page(app, server, browser, world, shots):
    with connect(app.extensions["test_db_url"]) as c:
        _week_of_stats(c)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    problems = _watch(page)
    _sign_in(page, server, "ops@example.test")
    page.goto(f"{server}/queues/")
    page.get_by_role("link", name="7 days").first.click()
    page.locator('[data-range="7d"]').wait_for()
    chart = page.locator('[data-charts="queues"] figure.chart').filter(has=page.locator("svg")).first
    chart.wait_for()
    labels = chart.locator('[data-axis="x"] text').all_text_contents()
    assert len(labels) >= 4 and all(len(label.split()) == 2 for label in labels), labels  # a day and a time
    assert chart.locator("polyline.line").count() == 2
    svg = chart.locator("svg")
    assert float(svg.get_attribute("data-y-max")) > float(svg.get_attribute("data-peak")) > 0
    box = svg.bounding_box()
    assert box and box["width"] > 250 and box["height"] > 80
    chart.scroll_into_view_if_needed()
    shots(page, "queue-7d")

    page.goto(f"{server}/queues/default/types/email.send?range=7d")
    charts = page.locator('[data-charts="type"] figure.chart svg')
    assert charts.count() == 3  # attempts, p95 handler time, waiting jobs
    p95 = charts.nth(1)
    top = float(p95.get_attribute("data-y-max"))
    assert top > float(p95.get_attribute("data-peak"))
    # The highest point of the p95 line sits below the chart's top edge.
    line_box = p95.locator("polyline.line").first.bounding_box()
    assert line_box["y"] > p95.bounding_box()["y"] + 10
    shots(page, "type-7d")
    assert problems == [], problems
    context.close()

    # fa: Jalali days and Persian digits on the week's axis, the values' units in Persian.
    with connect(app.extensions["test_db_url"]) as c:
        user = auth.create_user(c, "ops-fa-history@example.test", PASSWORD, "ops", "operator")
        auth.set_display_prefs(c, user["id"], locale="fa", calendar="jalali", time_zone="Asia/Tehran")
    fa = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = fa.new_page()
    _sign_in(page, server, "ops-fa-history@example.test")
    page.goto(f"{server}/queues/default/types/email.send?range=7d")
    assert page.get_attribute("html", "dir") == "rtl"
    labels = page.locator('[data-charts="type"] figure.chart').first.locator('[data-axis="x"] text').all_text_contents()
    assert labels and all(re.fullmatch(r"[۰-۹]{2}/[۰-۹]{2} [۰-۹]{2}:[۰-۹]{2}", label) for label in labels), labels
    assert page.locator('[data-range="7d"] a[aria-current]').inner_text() == "۷ روز"
    # Rates below one a minute with the Persian decimal separator (۰٫۴, not ۰.۴).
    rates = page.locator('[data-charts="type"] figure.chart').first.locator('text[data-label="y"]').all_text_contents()
    assert any("٫" in label for label in rates) and not any("." in label for label in rates), rates
    shots(page, "type-7d-fa")
    fa.close()
