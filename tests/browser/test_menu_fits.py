"""The main menu of the user with the most pages (an operator admin) stays on one line at 1366 px,
in en and in fa (issue 44: the 14-link menu wrapped): on wide screens it has the header's second row
to itself."""
from __future__ import annotations

import pytest

from opsboard import auth
from tests.browser.test_ops_journey import PASSWORD, browser, server  # noqa: F401  (fixtures)
from tests.conftest import connect

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("locale", ["en", "fa"])
def test_the_menu_stays_on_one_line_at_1366(app, server, browser, locale):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "admin-with-a-long-address@example.test", PASSWORD, "admin", "operator")
        c.execute("UPDATE users SET locale = %s", (locale,))
    page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "admin-with-a-long-address@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login" not in u)
    page.goto(f"{server}/queues/")
    links = page.locator(".mainnav a")
    assert links.count() >= 14
    tops = page.evaluate("() => Array.from(document.querySelectorAll('.mainnav a'), a => Math.round(a.getBoundingClientRect().top))")
    info = page.evaluate("() => [document.querySelector('.mainnav').getBoundingClientRect().width, Array.from(document.querySelectorAll('.mainnav a'), a => [a.textContent.trim(), Math.round(a.getBoundingClientRect().width)]), Array.from(document.querySelectorAll('.topbar > *'), e => [e.className, Math.round(e.getBoundingClientRect().width)])]")
    assert len(set(tops)) == 1, f"the menu wraps at 1366 px ({locale}): rows at {sorted(set(tops))} {info}"
    # ... and within the page: no link cut off or scrolled away.
    assert page.evaluate("() => { const n = document.querySelector('.mainnav'); return n.scrollWidth <= n.clientWidth + 1; }")
