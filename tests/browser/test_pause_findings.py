"""Issue 44's smaller findings on pausing, checked in Chromium: the critical queue's
confirmation box sits beside its label (and the label ticks it), and a pause and a resume
each say what was done on the page they return to, in en and in fa."""
from __future__ import annotations

import pytest

from opsboard import auth
from tests.browser.test_ops_journey import PASSWORD, browser, server  # noqa: F401  (fixtures)
from tests.conftest import connect

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("locale", ["en", "fa"])
def test_the_confirmation_box_sits_by_its_label_and_pause_and_resume_say_so(app, server, browser, locale):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        c.execute("UPDATE users SET locale = %s WHERE email = 'ops@example.test'", (locale,))
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)

    page.goto(f"{server}/pauses/new?kind=queue&target=critical&next=/queues/")
    box = page.locator("#pause-form input[name=confirm]").bounding_box()
    text = page.locator("#pause-form label.check span").bounding_box()
    # On one line: the box's middle within the text's line, and side by side.
    assert text["y"] <= box["y"] + box["height"] / 2 <= text["y"] + text["height"]
    assert box["width"] < 40
    page.fill("#pause-form textarea[name=reason]", "drill")
    page.click("#pause-form label.check span")           # the label's text ticks the box
    assert page.is_checked("#pause-form input[name=confirm]")
    page.click("#pause-form button[type=submit]")
    page.wait_for_url("**/queues/")
    said = page.locator("p.flash").inner_text()
    assert ("Paused queue critical" in said) if locale == "en" else ("متوقف" in said and "critical" in said)

    form = page.locator('#pauses-table tr[data-paused-target="critical"] form')
    form.locator("input[name=reason]").fill("drill over")
    form.locator("button[type=submit]").click()
    page.wait_for_url("**/queues/")
    said = page.locator("p.flash").inner_text()
    assert ("Resumed queue critical" in said) if locale == "en" else ("ادامه" in said and "critical" in said)


@pytest.mark.parametrize("locale,zone", [("fa", "Asia/Tehran"), ("en", "UTC")])
def test_the_auto_resume_time_is_asked_in_the_viewers_calendar_and_zone(app, server, browser, locale, zone):  # noqa: F811
    from datetime import datetime, time, timedelta
    from zoneinfo import ZoneInfo

    from opsboard import persian
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        c.execute("UPDATE users SET locale = %s WHERE email = 'ops@example.test'", (locale,))
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "ops@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)

    page.goto(f"{server}/pauses/new?kind=queue&target=bulk&next=/queues/")
    assert zone in page.locator("#resume-at legend").inner_text()
    day = datetime.now(ZoneInfo(zone)).date() + timedelta(days=2)
    if locale == "fa":
        # A Jalali day typed in Persian digits, in a text input (no Gregorian date picker).
        assert page.get_attribute("#resume-at input[name=resume_day]", "data-calendar") == "jalali"
        page.fill("#resume-at input[name=resume_day]", persian.jalali(day))
    else:
        page.fill("#resume-at input[name=resume_day]", day.isoformat())
    page.fill("#resume-at input[name=resume_time]", "10:30")
    page.fill("#pause-form textarea[name=reason]", "night batch window")
    page.click("#pause-form button[type=submit]")
    page.wait_for_url("**/queues/")
    with connect(app.extensions["test_db_url"]) as c:
        stored = c.execute("SELECT resume_at FROM pauses WHERE target = 'bulk'").fetchone()["resume_at"]
    assert stored == datetime.combine(day, time(10, 30), ZoneInfo(zone))
