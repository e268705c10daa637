"""Journey (issue 43): a customer's ticket on the web, through the real processes.

A customer (an end user: the ``member`` role, Persian) signs in on gunicorn, finds "My tickets" in the
navigation and opens a ticket with a screenshot attached.  An agent, in the dashboard (English), writes an
internal note and a reply.  ``python -m worker`` relays the events and delivers the customer's
notifications (inbox and email, at the sandbox); the customer follows the inbox item's link to
``/my/tickets/<id>``, sees the reply and not the note, and answers with a file.  axe-core finds nothing
serious on the customer's pages in fa and in en.
"""
from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from opsboard import auth
from opsboard.notifications import preferences
from opsboard.tickets import service
from tests.conftest import wait_for
from tests.journeys.helpers import PASSWORD, email_parts, login, member, watch_problems

pytestmark = pytest.mark.browser

AXE = (Path(__file__).parents[1] / "browser" / "axe.min.js").read_text(encoding="utf-8")
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")
SUBJECT = "فاکتور آذر نرسیده است"
NOTE = "Internal: NOTE-6620 customer is on the old billing plan."
REPLY = "We re-sent the invoice; REPLY-3309 please check your spam folder."
ANSWER = "پیدا شد، ممنون. ANSWER-7714"


def _axe(page) -> list[str]:
    page.add_script_tag(content=AXE)
    return page.evaluate("""() => axe.run(document, {resultTypes: ['violations']}).then(r =>
        r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
          .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | ')))""")


def test_customer_opens_follows_the_link_reads_the_reply_not_the_note_and_answers(stack, sandbox, browser, shots,
                                                                                   tmp_path):
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        service.set_policy(c, tenant["id"], "normal", 240, 1440)
        service.set_category(c, tenant["id"], "billing", "Billing")
        agent = member(c, "acme", "agent@acme.test", role="support_agent", locale="en")
        customer = service.ensure_requester(c, "mina@customer.test", tenant_id=tenant["id"])
        auth.set_password(c, customer["id"], PASSWORD)
        auth.set_display_prefs(c, customer["id"], locale="fa", calendar=None, time_zone=None)
        preferences.set_profile(c, customer["id"], locale="fa")
    stack.web(OPSBOARD_STORAGE_DIR=str(tmp_path / "storage"))
    stack.worker(OPSBOARD_STORAGE_DIR=str(tmp_path / "storage"))
    axe_found: dict[str, list[str]] = {}

    # ---- the customer opens a ticket on the web, in Persian
    cpage = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True).new_page()
    problems = watch_problems(cpage)
    login(cpage, stack.url, "mina@customer.test")
    cpage.locator("nav.mainnav a", has_text="تیکت‌های من").click()
    cpage.wait_for_url("**/my/tickets/")
    assert cpage.get_attribute("html", "dir") == "rtl" and "هنوز تیکتی ندارید" in cpage.inner_text("main")
    axe_found["fa list (empty)"] = _axe(cpage)
    cpage.click("#portal-new")
    cpage.wait_for_url("**/my/tickets/new")
    axe_found["fa new"] = _axe(cpage)
    cpage.fill("#portal-subject", SUBJECT)
    cpage.select_option("#portal-category", "billing")
    cpage.fill("#portal-body", "فاکتور ماه آذر به ایمیل من نیامده است.")
    cpage.set_input_files("#portal-new-files", files=[{"name": "screen.png", "mimeType": "image/png",
                                                       "buffer": PNG}])
    shots(cpage, "customer-new-fa")
    cpage.click("#portal-send-new")
    cpage.wait_for_url(re.compile(r".*/my/tickets/[0-9a-f-]{36}$"))
    ticket_id = uuid.UUID(cpage.url.rsplit("/", 1)[1])
    promise = cpage.locator("#portal-promise")
    assert promise.get_attribute("data-promise") == "answer_by"
    assert promise.inner_text().startswith("تلاش می‌کنیم تا ۱۴")          # a Jalali time, Persian digits
    assert promise.locator('bdi[dir="ltr"] time').count() == 1
    assert cpage.locator("[data-attachment] a", has_text="screen.png").count() == 1
    shots(cpage, "customer-ticket-fa")
    axe_found["fa ticket (new)"] = _axe(cpage)

    # ---- the agent, in the dashboard: an internal note, then a reply
    apage = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB").new_page()
    agent_problems = watch_problems(apage)
    login(apage, stack.url, "agent@acme.test")
    apage.goto(f"{stack.url}/tickets/{ticket_id}")
    apage.fill('form[data-action="note"] textarea[name=body]', NOTE)
    apage.locator('form[data-action="note"] button[type=submit]').click()
    apage.locator('div[data-kind="internal_note"]', has_text="NOTE-6620").wait_for()
    apage.fill('form[data-action="reply"] textarea[name=body]', REPLY)
    apage.locator('form[data-action="reply"] button[type=submit]').click()
    apage.locator('div[data-kind="reply"]', has_text="REPLY-3309").wait_for()
    shots(apage, "agent-replied")

    # ---- the customer's inbox (worker: relay, fan-out, delivery) carries the reply and a link to their page
    link = f"/my/tickets/{ticket_id}"

    def reply_in_inbox():
        cpage.goto(f"{stack.url}/inbox/")
        item = cpage.locator(".inbox-item", has_text="REPLY-3309")
        return item if item.count() == 1 else None

    item = wait_for(reply_in_inbox, timeout=40, interval=1, message="the reply in the customer's web inbox")
    assert "NOTE-6620" not in cpage.inner_text("main")
    shots(cpage, "customer-inbox")
    # The item's own link (the inbox renders data.link): the customer clicks it, as a person does.
    item.locator(f'a.inbox-open[href$="{link}"]').click()
    cpage.wait_for_url(f"**{link}")

    # ---- their ticket: the reply, never the note; the promise now the resolution's
    conversation = cpage.inner_text("#portal-conversation")
    assert "REPLY-3309" in conversation and "NOTE-6620" not in cpage.content()
    assert cpage.locator('[data-kind="internal_note"]').count() == 0
    assert cpage.locator("#portal-promise").get_attribute("data-promise") == "resolve_by"
    axe_found["fa ticket (replied)"] = _axe(cpage)

    # ---- they answer, with a file
    cpage.fill("#portal-reply-body", ANSWER)
    cpage.set_input_files("#portal-reply-files", files=[{"name": "receipt.txt", "mimeType": "text/plain",
                                                         "buffer": b"receipt 1405/09/16\n"}])
    cpage.click("#portal-send-reply")
    cpage.wait_for_url(f"**{link}#latest")
    latest = cpage.locator("#latest")
    assert "ANSWER-7714" in latest.inner_text() and "receipt.txt" in latest.inner_text()
    shots(cpage, "customer-answered-fa")

    # ---- the same pages in English (the language switch, saved on the user): axe again
    cpage.locator("button[data-locale-switch][value=en]").click()
    cpage.wait_for_function("document.documentElement.lang === 'en'")
    assert "We aim to resolve this by" in cpage.inner_text("#portal-promise")
    axe_found["en ticket"] = _axe(cpage)
    cpage.goto(f"{stack.url}/my/tickets/")
    assert cpage.locator(f'tr[data-ticket-id="{ticket_id}"]').count() == 1
    axe_found["en list"] = _axe(cpage)
    cpage.goto(f"{stack.url}/my/tickets/new")
    axe_found["en new"] = _axe(cpage)
    shots(cpage, "customer-new-en")
    assert {k: v for k, v in axe_found.items() if v} == {}
    # On a phone the ticket page fits the screen (no sideways scrolling), in both directions.
    cpage.set_viewport_size({"width": 390, "height": 844})
    for lang in ("en", "fa"):
        if lang == "fa":
            cpage.locator("button[data-locale-switch][value=fa]").click()
            cpage.wait_for_function("document.documentElement.lang === 'fa'")
        cpage.goto(f"{stack.url}{link}")
        assert cpage.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), lang
        shots(cpage, f"customer-ticket-phone-{lang}")

    # ---- what the customer received, anywhere: the reply with their page's link, never the note
    wait_for(lambda: any(r["rcpt_to"] == ["mina@customer.test"] for r in sandbox.records("email")), timeout=30,
             message="the reply's email to the customer")
    (mail,) = [r for r in sandbox.records("email") if r["rcpt_to"] == ["mina@customer.test"]]
    text, html = email_parts(mail)
    assert "REPLY-3309" in text and f'{link}"' in html and "/api/v1/" not in html
    assert "NOTE-6620" not in json.dumps(sandbox.records(), default=str)

    with stack.db() as c:
        _assert_rows(c, tenant, ticket_id, agent, customer)
    assert problems == [] and agent_problems == []


def _assert_rows(c, tenant, ticket_id, agent, customer):
    t = c.execute("SELECT * FROM tickets WHERE id = %s", (ticket_id,)).fetchone()
    assert (t["tenant_id"], t["requester_id"], t["subject"], t["status"]) == (tenant["id"], customer["id"], SUBJECT,
                                                                               "new")
    assert t["first_responded_at"] is not None
    msgs = c.execute("SELECT kind, author_id, body FROM ticket_messages WHERE ticket_id = %s ORDER BY created_at, id",
                     (ticket_id,)).fetchall()
    assert [(m["kind"], m["author_id"]) for m in msgs] == [
        ("reply", customer["id"]), ("system", None), ("internal_note", agent["id"]), ("reply", agent["id"]),
        ("reply", customer["id"])], msgs
    assert msgs[-1]["body"] == ANSWER
    atts = c.execute("SELECT a.filename, a.content_type, m.author_id FROM ticket_attachments a "
                     "JOIN ticket_messages m ON m.id = a.message_id ORDER BY a.id").fetchall()
    assert [(a["filename"], a["content_type"], a["author_id"]) for a in atts] == [
        ("screen.png", "image/png", customer["id"]), ("receipt.txt", "text/plain", customer["id"])]
    audit = [(a["action"], a["actor_id"]) for a in c.execute(
        "SELECT action, actor_id FROM audit_log WHERE target_id = %s ORDER BY id", (str(ticket_id),))]
    assert audit == [("ticket.create", customer["id"]), ("ticket.note", agent["id"]), ("ticket.reply", agent["id"]),
                     ("ticket.reply", customer["id"])], audit
    notes = c.execute("SELECT recipient_id, body, title FROM notifications WHERE event_type = 'ticket.message_added'"
                      ).fetchall()
    # The agent's reply reaches the customer; the note reaches nobody (no assignee), the customer's answer no one
    # either (no assignee: the author is left out).
    assert [(n["recipient_id"], f"/my/tickets/{ticket_id}" in n["body"]) for n in notes] == [(customer["id"], True)]
    assert all("NOTE-6620" not in n["body"] + n["title"] for n in notes)
