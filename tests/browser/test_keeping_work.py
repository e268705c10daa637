"""Issue 23, "Pages that keep the user's work", in a real browser: ticket actions keep unsent replies
and notes (and a reload keeps them too), and keep keyboard focus; the report form survives an error;
the template editor shows publish errors in place, previews the fa version that would be sent and
leaves the diff expander as the author set it; queue health refreshes without taking focus; every
page begins with a skip link."""
from __future__ import annotations

import json

import pytest

from opsboard import audit, auth
from opsboard.notifications import templates
from opsboard.tickets import service
from tests.browser.test_operator_actions import _sign_in
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support import dashboard as seed
from tests.support.tickets import make_desk

pytestmark = pytest.mark.browser


@pytest.fixture
def ticket(app):
    with connect(app.extensions["test_db_url"]) as c:
        desk = make_desk(c, "acme")
        auth.create_user(c, "agent@example.test", PASSWORD, "support_agent", "acme")
        return service.create_ticket(c, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                     subject="VPN drops every hour", body="Since Monday.", category="billing",
                                     priority="high")


def _focused(page) -> str:
    return page.evaluate("(() => { const a = document.activeElement; "
                         "return a === document.body ? 'body' : (a.id || a.tagName.toLowerCase()); })()")


def test_ticket_actions_keep_drafts_and_focus_and_a_reload_keeps_drafts(app, server, browser, ticket, shots):  # noqa: F811
    page, problems = _sign_in(browser, server, "agent@example.test")
    page.goto(f"{server}/tickets/{ticket['id']}")
    reply, note = page.locator("#ticket-reply-body"), page.locator("#ticket-note-body")
    reply.fill("Dear customer, we are looking into the VPN.")
    note.fill("Probably the new firewall rule.")
    # Triage from the keyboard: the ticket changes, the drafts stay, focus lands on the new status.
    page.focus("#ticket-btn-triage")
    page.keyboard.press("Enter")
    page.locator('#ticket[data-status="triaged"]').wait_for()
    assert reply.input_value() == "Dear customer, we are looking into the VPN."
    assert note.input_value() == "Probably the new firewall rule."
    page.locator("#ticket-status:focus").wait_for()   # (no wait_for_function: the CSP forbids its eval)
    shots(page, "triaged-drafts-kept")
    # A resolution typed but not sent survives the next action too.
    page.fill("#ticket-resolve-summary", "Firewall rule rolled back.")
    # Start work: the reply, the note and the resolution are all still there.
    page.click("#ticket-btn-start")
    page.locator('#ticket[data-status="in_progress"]').wait_for()
    assert reply.input_value() == "Dear customer, we are looking into the VPN."
    assert page.locator("#ticket-resolve-summary").input_value() == "Firewall rule rolled back."
    # An action whose button is still there after it keeps focus on that button.
    page.select_option('form[data-action="assign"] select[name=assignee_id]', label="agent@example.test")
    page.focus("#ticket-btn-assign")
    page.keyboard.press("Enter")
    page.locator("[data-assignee]", has_text="agent@example.test").wait_for()
    page.locator("#ticket-btn-assign:focus").wait_for()
    assert note.input_value() == "Probably the new firewall rule."

    # A reload keeps both drafts (saved per ticket in the browser).
    page.reload()
    assert reply.input_value() == "Dear customer, we are looking into the VPN."
    assert note.input_value() == "Probably the new firewall rule."
    # Sending the reply clears it (here and in the browser's store); the note stays a draft.
    page.click("#ticket-btn-reply")
    page.locator('div[data-kind="reply"]', has_text="looking into the VPN").wait_for()
    assert reply.input_value() == "" and note.input_value() == "Probably the new firewall rule."
    page.locator(":focus").wait_for()       # focus moves once the swap has settled, not with the new message
    assert _focused(page) != "body"
    page.reload()
    assert reply.input_value() == "" and note.input_value() == "Probably the new firewall rule."
    shots(page, "reply-sent-note-kept")
    # Signing out forgets every draft kept in this browser.
    page.click("form[data-clear-drafts] button[type=submit]")
    page.wait_for_url("**/login*")
    assert page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('opsboard.draft.')).length") == 0
    assert problems == [], problems


def test_report_form_shows_errors_by_the_field_and_keeps_working(app, server, browser, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        seed.tenant(c, "acme")
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/reports/")
    form = page.locator("#report-form")
    form.locator("select[name=tenant_id]").select_option(label="acme · acme")
    form.locator("input[name=date_from]").fill("2026-11-01")
    form.locator("input[name=date_to]").fill("2026-11-02")
    form.locator("input[name=time_zone]").fill("Mars/Olympus")
    form.locator("button[type=submit]").click()
    error = page.locator('#report-error-time_zone [data-error-code="invalid_time_zone"]')
    error.wait_for()
    # The runs list and its polling are still there.
    runs = page.locator("#report-runs")
    assert runs.count() == 1 and runs.get_attribute("hx-trigger")
    shots(page, "time-zone-refused")
    # The next submit works: the run appears, the error goes.
    form.locator("input[name=time_zone]").fill("Asia/Tehran")
    form.locator("button[type=submit]").click()
    page.locator("#report-runs tr[data-run-id]").wait_for()
    assert error.count() == 0
    # And the one after that makes another run (a fresh request key, not the first run again).
    form.locator("button[type=submit]").click()
    page.locator("#report-runs tr[data-run-id]").nth(1).wait_for()
    shots(page, "runs-requested")
    with connect(app.extensions["test_db_url"]) as c:
        assert c.execute("SELECT count(*) AS n FROM report_runs").fetchone()["n"] == 2
    assert problems == [], problems


def test_template_editor_publish_errors_fallback_preview_and_diff_expander(app, server, browser, shots):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "author@example.test", PASSWORD, "template_author", "operator")
        templates.seed(c, "order.paid", "inbox", "fa", "پرداخت سفارش", "سفارش {{ order }} پرداخت شد.", "order",
                       {"order": 42})
        templates.seed(c, "order.paid", "inbox", "en", "Order paid", "Order {{ order }} was paid.", "order",
                       {"order": 42})
        # A fa draft that cannot be published: it uses a variable it does not declare.
        templates.save_draft(c, audit.Actor(label="author@example.test"), "order.paid", "inbox", "fa",
                             subject="پیش‌نویس خراب", body="سفارش {{ order }} برای {{ payer }}", variables="order",
                             sample={"order": 42})
    page, problems = _sign_in(browser, server, "author@example.test", viewport=(1400, 900))
    # The en editor's fa (fallback) column shows what would be sent in fa: the published version.
    page.goto(f"{server}/templates/order.paid/edit?channel=inbox&locale=en")
    fa = page.locator('td.preview-cell[data-channel="inbox"][data-locale="fa"]')
    fa.get_by_text("پرداخت سفارش").wait_for()
    assert "پیش‌نویس خراب" not in fa.inner_text()
    # The diff expander stays as the author left it while they type.
    page.fill("textarea[name=body]", "Order {{ order }} was paid in full.")
    diff = page.locator("#preview-diff")
    page.locator("#preview-diff[open]").wait_for()
    diff.locator("summary").click()
    assert diff.evaluate("d => d.open") is False
    with page.expect_response(lambda r: "/_preview" in r.url):
        page.locator("textarea[name=body]").press_sequentially(" Thanks!")
    page.locator('td.preview-cell[data-locale="en"]', has_text="Thanks!").wait_for()
    assert diff.evaluate("d => d.open") is False
    shots(page, "fallback-published-diff-closed")

    # Publishing the broken fa draft from its editor: the errors show in the editor.
    page.goto(f"{server}/templates/order.paid/edit?channel=inbox&locale=fa")
    page.fill("#publish-form input[name=reason]", "ready")
    page.click("#publish-form button[type=submit]")
    error = page.locator("#publish-result .result.error")
    error.wait_for()
    assert "payer" in error.inner_text()
    assert "/edit" in page.url and page.locator("#template-form").count() == 1
    shots(page, "publish-refused-in-editor")
    assert problems == [], problems


@pytest.mark.parametrize("lang,label", [("en", "Skip to content"), ("fa", "پرش به محتوا")])
def test_queue_health_keeps_focus_and_every_page_has_a_skip_link(app, server, browser, shots, lang, label):  # noqa: F811
    with connect(app.extensions["test_db_url"]) as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", PASSWORD, "ops", "operator")
        acme = seed.tenant(c, "acme")
        seed.jobs(c, acme, 3)
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)
    page, problems = _sign_in(browser, server, "ops@example.test")
    page.goto(f"{server}/queues/")
    if page.locator("html").get_attribute("lang") != lang:
        with page.expect_navigation():
            page.locator(f"button[data-locale-switch][value={lang}]").click()
        assert page.locator("html").get_attribute("lang") == lang
    # The first Tab reaches the skip link; it takes the user to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    assert page.evaluate("document.activeElement.textContent.trim()") == label
    page.keyboard.press("Enter")
    assert _focused(page) == "content"
    # A link inside the queue health grid keeps focus over its refreshes (every 3 s).
    link = page.locator("#health-table a[href*='type=diag.noop']").first
    href = link.get_attribute("href")
    link.focus()
    for _ in range(2):
        with page.expect_response(lambda r: "/queues/_health" in r.url, timeout=10_000):
            pass
        page.locator(f"#queue-health a[href={json.dumps(href)}]:focus").wait_for(timeout=5_000)
    shots(page, f"focus-kept-{lang}")
    for path in ("/dead/", "/jobs/", "/reports/", "/audit/"):
        page.goto(server + path)
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "skip-link", path
    assert problems == [], problems
