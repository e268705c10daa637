"""A template author previews a template in fa and en side by side in a real browser;
the fa preview renders right-to-left, and the preview follows typing (htmx, debounced).
Screenshots go to test-output/<test name>/."""
from __future__ import annotations

import pytest

from opsboard import auth
from opsboard.notifications import templates
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect

pytestmark = pytest.mark.browser


def test_author_previews_fa_and_en_side_by_side_with_rtl(app, server, browser, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "author@example.test", PASSWORD, "template_author", "operator")
        templates.seed(c, "order.paid", "inbox", "fa", "پرداخت سفارش",
                       "مبلغ {{ amount_cents|money(currency)|fa_digits }} پرداخت شد.", "amount_cents, currency",
                       {"amount_cents": 125000, "currency": "IRR"})
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "author@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}/templates/")
    page.goto(f"{server}/templates/order.paid/edit?channel=inbox&locale=en")
    page.fill("input[name=subject]", "Order paid")
    page.fill("input[name=variables]", "amount_cents, currency")
    page.fill("textarea[name=sample]", '{"amount_cents": 125000, "currency": "IRR"}')
    page.fill("textarea[name=body]", "{{ amount_cents|money(currency) }} was paid.")
    en = page.locator('td.preview-cell[data-channel="inbox"][data-locale="en"]')
    fa = page.locator('td.preview-cell[data-channel="inbox"][data-locale="fa"]')
    en.get_by_text("1,250.00 IRR was paid.").wait_for(timeout=10_000)
    fa.get_by_text("پرداخت سفارش").wait_for(timeout=10_000)
    assert "۱,۲۵۰.۰۰ IRR" in fa.inner_text()
    assert fa.evaluate("el => getComputedStyle(el).direction") == "rtl"
    assert en.evaluate("el => getComputedStyle(el).direction") == "ltr"
    fa_box, en_box = fa.bounding_box(), en.bounding_box()
    assert abs(fa_box["y"] - en_box["y"]) < 5 and fa_box["x"] > en_box["x"]   # side by side
    shots(page, "fa-en-side-by-side")
    # A variable used but missing from the sample is flagged inline as the author types.
    page.fill("textarea[name=body]", "{{ amount_cents|money(currency) }} was paid by {{ payer }}.")
    page.locator('code.missing[data-var="payer"]').wait_for(timeout=10_000)
    shots(page, "missing-variable-flagged")
