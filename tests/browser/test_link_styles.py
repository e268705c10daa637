"""An attachment link among words is told apart by more than colour (issue 44: axe's
link-in-text-block, serious, on the ticket pages): the stylesheet underlines a[download]."""
from __future__ import annotations

import pytest

from tests.browser.test_ops_journey import browser, server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_a_download_link_in_text_is_underlined(server, browser):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{server}/login")
    # The ticket pages' markup for an attachment, in the page's own stylesheet.
    page.evaluate("""() => {
      const div = document.createElement('div');
      div.innerHTML = '📎 <a href="#" download>invoice.pdf</a> <span class="muted">application/pdf · 12 bytes</span>';
      document.querySelector('main').appendChild(div);
    }""")
    line = page.evaluate("() => getComputedStyle(document.querySelector('main a[download]')).textDecorationLine")
    assert line == "underline"
