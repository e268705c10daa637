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
