"""Issue 23, item by item, in a real browser: Persian throughout (catalogue words, Jalali where the user chose it,
left-to-right islands, chart axes), the language switch, the end user's inbox and settings, ticket numbers in
search, the favicon, the template editor on a phone.  The world is test_every_page's."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from opsboard import persian
from opsboard.notifications import inbox
from tests.browser.test_every_page import _set_locale, _sign_in, every_role  # noqa: F401  (fixture)
from tests.browser.test_ops_journey import browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed

pytestmark = pytest.mark.browser


def _page(browser, server, email, *, width=1280, height=900, **kw):
    context = browser.new_context(viewport={"width": width, "height": height}, **kw)
    page = context.new_page()
    _sign_in(page, server, email)
    return page


def test_fa_words_from_the_core_and_jalali_where_chosen(app, server, browser, every_role, shots):  # noqa: F811
    email = every_role["emails"]["admin"]
    _set_locale(app, email, "fa")
    page = _page(browser, server, email)

    # Alert summaries (stored in English by the core) read in Persian, the queue name a left-to-right island.
    page.goto(f"{server}/alerts/")
    summary = page.locator('tr[data-rule="no_worker"] td a bdi').first
    assert summary.inner_text().startswith("هیچ کارگر زنده‌ای"), summary.inner_text()
    assert summary.locator('bdi[dir="ltr"]').first.inner_text() in ("default", "bulk", "critical")

    # Report kinds and their fields from the catalogue; the run's kind too.
    page.goto(f"{server}/reports/")
    assert page.locator("select[name=kind] option").first.inner_text() == "فعالیت کارهای مستأجر"
    assert "از (روز)" in page.locator("#report-form").inner_text()
    assert "فعالیت کارهای مستأجر" in page.locator("#report-runs tbody tr").first.inner_text()

    # Jalali dates typed in a text input, checked by the browser and converted on the server.
    date_from = page.locator('#report-form input[name=date_from]')
    assert date_from.get_attribute("type") == "text" and date_from.get_attribute("data-calendar") == "jalali"
    date_from.fill("۱۴۰۵/۰۱/۰۱")
    page.fill("#report-form input[name=date_to]", "1405/01/02")
    page.fill("#report-form input[name=time_zone]", "Asia/Tehran")
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/reports/")) as answer:
        page.click("#report-form button[type=submit]")
    assert answer.value.status == 200
    with connect(app.extensions["test_db_url"]) as c:
        params = c.execute("SELECT params FROM report_runs ORDER BY created_at DESC LIMIT 1").fetchone()["params"]
    assert params["date_from"] == "2026-03-21" and params["date_to"] == "2026-03-22"
    # A day that does not exist in the Jalali calendar is refused with a 400, not stored.
    refused = page.request.post(f"{server}/reports/", form={
        "csrf_token": page.locator("#report-form input[name=csrf_token]").input_value(),
        "kind": "job_activity", "tenant_id": page.locator("#report-form select[name=tenant_id]").input_value(),
        "date_from": "1404/12/30", "date_to": "1405/01/02", "time_zone": "UTC"}, headers={"HX-Request": "true"})
    assert refused.status == 400 and "invalid_date" in refused.text()

    # The schedule's description is Persian and its next slot is Jalali (in its own zone and in the user's).
    page.goto(f"{server}/reports/schedules")
    row = page.locator('tr[data-schedule="reports.nightly_activity"]')
    assert "گزارش فعالیت کارهای دیروزِ هر مستأجر" in row.inner_text()
    slot_cell = row.locator("td").nth(4)
    assert slot_cell.locator("time").first.inner_text().startswith("۱۴")
    local = slot_cell.locator('bdi[dir="ltr"]').first
    assert local.inner_text().startswith("۱۴") and local.inner_text().endswith("۰۱:۳۰")
    shots(page, "schedules-fa")

    # The audit log: target types and system reasons in Persian, a report's parameters as codes (no Python dict),
    # the ticket actions' reasons translated; the day filter takes a Jalali day.
    page.goto(f"{server}/audit/")
    text = page.locator("table.data").inner_text()
    assert "{'" not in text and "Reply" not in text and "Assign" not in text
    assert "پاسخ" in text and "گزارش" in text
    since = page.locator("input[name=since]")
    assert since.get_attribute("data-calendar") == "jalali"
    tomorrow = persian.format_day(seed.utc(2030, 1, 1).date(), locale="en", calendar="jalali")
    page.goto(f"{server}/audit/?since={tomorrow}")
    assert page.locator("tr[data-audit-id]").count() == 0
    page.goto(f"{server}/audit/?since=1400/01/01")
    assert page.locator("tr[data-audit-id]").count() > 0
    shots(page, "audit-fa")

    # The SLA badge in the page's language only (issue 44: it read "On track · در مسیر").
    page.goto(f"{server}/tickets/")
    badge = page.locator("[data-sla]").first
    text = badge.inner_text()
    assert text and not any("a" <= ch.lower() <= "z" for ch in text), text
    assert badge.locator('[lang="en"]').count() == 0


def test_left_to_right_islands_and_chart_axes(app, server, browser, every_role, shots):  # noqa: F811
    email = every_role["emails"]["admin"]
    _set_locale(app, email, "fa")
    page = _page(browser, server, email)

    # A short job id: the ellipsis at its left end, in a right-to-left page too.
    page.goto(f"{server}/reports/")
    page.goto(f"{server}/jobs/{every_role['dead'][0]}")
    page.goto(f"{server}/notifications/")
    page.goto(f"{server}/dead/")
    page.goto(f"{server}/jobs/?status=dead")
    page.goto(f"{server}/audit/")
    with connect(app.extensions["test_db_url"]) as c:
        run = c.execute("SELECT id FROM report_runs LIMIT 1").fetchone()["id"]
        job = c.execute("SELECT id FROM jobs WHERE type = 'reports.request' LIMIT 1").fetchone()["id"]
        c.execute("UPDATE report_runs SET status = 'failed', failed_job_id = %s WHERE id = %s", (job, run))
    page.goto(f"{server}/reports/")
    code = page.locator(f'a[title="{job}"] code').first
    assert code.inner_text() == "…" + str(job)[-12:]
    ellipsis_left = code.evaluate("""e => { const r = document.createRange(); r.setStart(e.firstChild, 0);
        r.setEnd(e.firstChild, 1); const a = r.getBoundingClientRect(); r.setStart(e.firstChild, 1);
        r.setEnd(e.firstChild, 2); const b = r.getBoundingClientRect(); return a.left < b.left; }""")
    assert ellipsis_left

    # Times are left-to-right islands: the date before the time, reading left to right.
    t = page.locator("#report-runs time").first
    assert t.evaluate("e => getComputedStyle(e).direction") == "ltr"
    assert t.evaluate("e => getComputedStyle(e).unicodeBidi") == "isolate"

    # The ticket's requester address stays inside its box.
    page.goto(f"{server}/tickets/{every_role['ticket']['id']}")
    fits = page.locator(".stat bdi[dir=ltr]").first.evaluate("""e => { const b = e.getBoundingClientRect();
        const box = e.closest('.stat').getBoundingClientRect(); return b.left >= box.left - 0.5 && b.right <= box.right + 0.5; }""")
    assert fits

    # Chart y-axis labels fit inside the chart (they end at the axis; the axis is as wide as the longest).
    from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
    with connect(app.extensions["test_db_url"]) as c:
        now = seed.db_now(c).replace(second=0, microsecond=0)
        for m in range(0, 60, 5):    # about 2,000 attempts a minute, some of them slow (3-4 digit labels)
            hist = [0] * (len(DURATION_BUCKETS_MS) + 1)
            hist[bucket_index(800 + m * 10)] += 50
            c.execute("""INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, duration_hist)
                         VALUES (%s, 'w1', 'default', 'email.send', %s, 0, 0, %s)""",
                      (now - timedelta(minutes=m), 1800 + m * 7, hist))
    for locale in ("fa", "en"):
        _set_locale(app, email, locale)
        page.goto(f"{server}/queues/")
        labels = page.locator('svg.chart-svg text[data-label="y"]')
        assert labels.count() > 0
        lefts = labels.evaluate_all("es => es.map(e => e.getBBox().x)")
        assert min(lefts) >= 0, (locale, lefts)
        shots(page, f"charts-{locale}")


def test_language_switch_keeps_the_query_and_the_account_follows_the_browser(app, server, browser, every_role):  # noqa: F811
    email = every_role["emails"]["admin"]
    _set_locale(app, email, "en")
    page = _page(browser, server, email, locale="en-GB")
    page.goto(f"{server}/jobs/?status=dead&q=abc")
    assert page.get_attribute("html", "lang") == "en"
    page.click("button[data-locale-switch]")
    page.wait_for_load_state()
    assert page.get_attribute("html", "lang") == "fa"
    assert page.url.endswith("/jobs/?status=dead&q=abc")

    # "From the browser" follows Accept-Language (this browser asks for English): English now.
    page.goto(f"{server}/account")
    assert page.get_attribute("html", "lang") == "fa"
    page.select_option("#display-settings select[name=locale]", "")
    page.click("#display-settings button[type=submit]")
    page.wait_for_load_state()
    assert page.get_attribute("html", "lang") == "en"

    # Saving English from a Persian page: the confirmation is English.
    page.goto(f"{server}/account")
    page.select_option("#display-settings select[name=locale]", "fa")
    page.click("#display-settings button[type=submit]")
    page.wait_for_load_state()
    assert page.get_attribute("html", "lang") == "fa"
    page.select_option("#display-settings select[name=locale]", "en")
    page.click("#display-settings button[type=submit]")
    page.wait_for_load_state()
    assert page.locator(".flash").inner_text() == "Display settings saved."


def test_ticket_number_search_and_favicon(app, server, browser, every_role):  # noqa: F811
    email = every_role["emails"]["support_agent"]
    _set_locale(app, email, "fa")
    page = _page(browser, server, email)
    number = every_role["ticket"]["number"]
    for q in (f"#{number}", str(number), "#" + persian.fa_digits(number), persian.fa_digits(number)):
        page.goto(f"{server}/tickets/?q=" + q.replace("#", "%23"))
        assert page.locator(f'tr[data-ticket-id="{every_role["ticket"]["id"]}"]').count() == 1, q
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    answer = page.request.get(server + icon)
    assert answer.status == 200 and answer.headers["content-type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    assert page.request.get(f"{server}/favicon.ico").status == 200


def test_the_end_users_inbox_and_settings(app, server, browser, every_role, shots):  # noqa: F811
    email = every_role["emails"]["member"]
    for locale, width in (("fa", 1280), ("en", 390)):
        _set_locale(app, email, locale)
        page = _page(browser, server, email, width=width, height=844)
        page.goto(f"{server}/inbox/")
        page.locator("#live-status[data-live]").wait_for()
        items = page.locator("#inbox-items")
        assert items.evaluate("e => getComputedStyle(e).listStyleType") == "none"
        unread = page.locator(".inbox-item.unread").first
        read = page.locator(".inbox-item.read").first
        style = "e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).borderInlineStartColor].join()"
        assert unread.evaluate(style) != read.evaluate(style)
        badge = page.locator("#unread-badge")
        assert badge.evaluate("e => getComputedStyle(e).borderRadius") != "0px"
        # The time of a row is a left-to-right island (date, then time).
        assert unread.locator("time").evaluate("e => getComputedStyle(e).direction") == "ltr"
        if locale == "fa":
            assert unread.locator("button[data-action=read]").inner_text() == "علامت خوانده‌شده"
        # A notification arriving live gets Mark read and Archive, which work.
        with connect(app.extensions["test_db_url"]) as c:
            user = c.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()["id"]
            tenant = c.execute("SELECT id FROM tenants WHERE slug = 'walk-desk'").fetchone()["id"]
            nid = uuid.uuid4()
            c.execute("""INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category,
                         template_key, locale, title, body) VALUES (%s, %s, %s, %s, 'walk.notice', 'ticket',
                         'walk.notice', 'fa', 'تازه رسید', 'یک پیام زنده')""", (nid, tenant, user, uuid.uuid4()))
            c.execute("SELECT pg_notify(%s, %s)", (inbox.CHANNEL, str(user)))
        live = page.locator(f"#n-{nid}")
        live.wait_for(timeout=15_000)
        assert live.locator("button[data-action=read]").count() == 1
        assert live.locator("button[data-action=archive]").count() == 1
        shots(page, f"inbox-{locale}-{width}")
        live.locator("button[data-action=read]").click()
        page.locator(f"#n-{nid}.read").wait_for()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")

        page.goto(f"{server}/inbox/preferences")
        # Each quiet-hours checkbox sits beside its label, on the same line.
        for label in page.locator("#quiet-form label:has(input[type=checkbox])").all():
            box = label.locator("input[type=checkbox]").bounding_box()
            whole = label.bounding_box()
            assert whole["height"] < box["height"] * 2.5, whole
            assert abs((box["y"] + box["height"] / 2) - (whole["y"] + whole["height"] / 2)) < 4
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        shots(page, f"preferences-{locale}-{width}")
        page.context.close()


def test_template_editor_is_one_column_on_a_phone(app, server, browser, every_role, shots):  # noqa: F811
    email = every_role["emails"]["template_author"]
    for locale in ("fa", "en"):
        _set_locale(app, email, locale)
        page = _page(browser, server, email, width=390, height=844, is_mobile=True, has_touch=True)
        page.goto(f"{server}/templates/order.paid/edit?channel=inbox&locale=fa")
        page.locator("td.preview-cell").first.wait_for()
        form = page.locator("#template-form").bounding_box()
        preview = page.locator("#preview").bounding_box()
        assert preview["y"] >= form["y"] + form["height"] - 1          # stacked, not side by side
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shots(page, f"template-editor-{locale}-390")
        page.context.close()
