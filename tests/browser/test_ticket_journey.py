"""A support agent's journey in a real browser: the queue is the landing page; triage,
assign, an internal note, a reply, a refused resolve (inline error), then resolve."""
from __future__ import annotations

import pytest

from opsboard import auth
from opsboard.tickets import service
from tests.browser.test_ops_journey import PASSWORD, browser, server, shots  # noqa: F401  (fixtures)
from tests.conftest import connect
from tests.support.tickets import make_desk

pytestmark = pytest.mark.browser


@pytest.fixture
def ticket(app):
    with connect(app.extensions["test_db_url"]) as c:
        desk = make_desk(c, "acme")
        auth.create_user(c, "agent@example.test", PASSWORD, "support_agent", "acme")
        t = service.create_ticket(c, desk.caller("requester"), tenant_id=desk.tenant["id"],
                                  subject="پرینتر کار نمی‌کند · Printer is down", body="Since this morning.",
                                  category="billing", priority="high")
    return t


def test_agent_triages_assigns_notes_replies_and_resolves(app, server, browser, ticket, shots):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    # Script errors and CSP violations (refused requests show as 4xx responses, checked by the forms).
    page.on("console", lambda m: problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.goto(f"{server}/login")
    page.fill("input[name=email]", "agent@example.test")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/tickets/")
    row = page.locator(f'tr[data-ticket-id="{ticket["id"]}"]')
    assert "On track" in row.inner_text() and "در مسیر" not in row.inner_text()  # one language (issue 44)
    shots(page, "queue")
    row.locator("a").first.click()
    page.wait_for_url(f"**/tickets/{ticket['id']}")

    def submit(action: str):
        page.locator(f'form[data-action="{action}"] button[type=submit]').click()

    submit("triage")
    page.locator('#ticket[data-status="triaged"]').wait_for()
    page.select_option('form[data-action="assign"] select[name=assignee_id]', label="agent@example.test")
    submit("assign")
    page.locator("[data-assignee]", has_text="agent@example.test").wait_for()
    page.fill('form[data-action="note"] textarea[name=body]', "Internal: customer is on the legacy plan.")
    submit("note")
    page.locator('div[data-kind="internal_note"]').wait_for()
    page.fill('form[data-action="reply"] textarea[name=body]', "We are replacing the toner today.")
    submit("reply")
    page.locator('div[data-kind="reply"]', has_text="replacing the toner").wait_for()
    # resolve without a code: refused inline, in the form
    submit("resolve")
    page.locator('#result-resolve [data-error-code="resolution_required"]').wait_for()
    shots(page, "resolve-refused")
    page.fill('form[data-action="resolve"] input[name=resolution_code]', "fixed")
    page.fill('form[data-action="resolve"] textarea[name=resolution_summary]', "Toner replaced.")
    submit("resolve")
    page.locator('#ticket[data-status="resolved"]').wait_for()
    assert "Internal note" in page.locator('div[data-kind="internal_note"]').inner_text()
    shots(page, "resolved")
    assert problems == []
    with connect(app.extensions["test_db_url"]) as c:
        actions = [r["action"] for r in c.execute(
            "SELECT action FROM audit_log WHERE target_id = %s ORDER BY id", (str(ticket["id"]),)).fetchall()]
    assert actions == ["ticket.create", "ticket.triage", "ticket.assign", "ticket.note", "ticket.reply",
                       "ticket.resolve"]
