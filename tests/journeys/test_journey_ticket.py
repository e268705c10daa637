"""Journey 3: a customer's ticket, an agent's answer, and the SLA, through the real processes.

The customer opens a ticket over ``POST /api/v1/tickets`` (their ``obu_`` token, gunicorn); its
first-response time passes (1 minute, the tenant's shortest SLA) and ``python -m worker``'s
``tickets.sla_check`` marks the breach: the team (an en agent, a fa admin) hears of it by inbox, push
and email.  The agent, in chromium on ``/tickets/``, sees the breach, writes an internal note and a
reply; the customer's inbox (API) and email carry the reply in Persian with a link to the ticket,
and nothing of the note reaches the customer anywhere.
"""
from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import datetime, timedelta

import pytest

from opsboard import auth
from opsboard.notifications import preferences
from opsboard.tickets import service
from tests.conftest import wait_for
from tests.journeys.helpers import (assert_delivery_final, email_parts, login, member, user_token,
                                    watch_problems)

pytestmark = pytest.mark.browser

NOTE = "Internal: NOTE-7731 the customer is on the legacy plan."
REPLY = "We replaced the toner; REPLY-4410 please try again."
SUBJECT = "چاپگر کار نمی‌کند"


def _first_response_time_passes(c, ticket_id) -> None:
    """The clock's only stand-in: the ticket was opened 61 s earlier (its due times and the jobs planned
    for them move back together, as if the minute had passed)."""
    shift = timedelta(seconds=61)
    c.execute("UPDATE tickets SET created_at = created_at - %(s)s, first_response_due_at = first_response_due_at - %(s)s,"
              " resolution_due_at = resolution_due_at - %(s)s WHERE id = %(id)s", {"s": shift, "id": ticket_id})
    for job in c.execute("SELECT * FROM jobs WHERE type = 'tickets.sla_check' AND payload->>'ticket_id' = %s",
                         (str(ticket_id),)).fetchall():
        due = (datetime.fromisoformat(job["payload"]["due_at"]) - shift).isoformat()
        c.execute("UPDATE jobs SET available_at = available_at - %s, payload = payload || jsonb_build_object("
                  "'due_at', %s::text), idempotency_key = %s WHERE id = %s",
                  (shift, due, f"sla:{ticket_id}:{job['payload']['kind']}:{due}", job["id"]))


def test_customer_ticket_agent_reply_and_sla_breach(stack, sandbox, browser, shots):
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        for priority, (first, resolution) in {"urgent": (1, 240), "normal": (240, 1440)}.items():
            service.set_policy(c, tenant["id"], priority, first, resolution)
        service.set_category(c, tenant["id"], "printing", "Printing")
        agent = member(c, "acme", "agent@acme.test", role="support_agent", locale="en")
        admin = member(c, "acme", "modir@acme.test", role="admin", locale="fa")
        agent_token = user_token(c, agent["id"])
        customer = service.ensure_requester(c, "mina@customer.test", tenant_id=tenant["id"])
        member_row = c.execute("SELECT role FROM memberships WHERE user_id = %s", (customer["id"],)).fetchone()
        assert member_row["role"] == "member"
        preferences.set_profile(c, customer["id"], locale="fa")
        customer_token = user_token(c, customer["id"])
    stack.web()
    stack.worker()
    device = stack.api("POST", "/api/v1/devices", agent_token, sandbox.new_push_subscription())
    assert device.status == 201, device.body

    # ---- the customer opens a ticket
    opened = stack.api("POST", "/api/v1/tickets", customer_token,
                       {"subject": SUBJECT, "body": "از صبح چیزی چاپ نمی‌شود.", "priority": "urgent",
                        "category": "printing"}, headers={"Idempotency-Key": "ticket-1"})
    assert opened.status == 201, opened.body
    ticket_id = uuid.UUID(opened.body["id"])
    number = opened.body["number"]

    # ---- nobody answers within the minute: the breach reaches the team
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'tickets.sla_check'")
                 .fetchone()["n"] == 2, timeout=10, message="the SLA jobs planned")
        _first_response_time_passes(c, ticket_id)
    wait_for(lambda: len(sandbox.records("email")) == 2 and len(sandbox.records("push")) == 1, timeout=40,
             message="the team's breach emails and push")
    breach_mail = {r["rcpt_to"][0]: r for r in sandbox.records("email")}
    assert breach_mail["agent@acme.test"]["subject"] == f"Ticket #{number} breached its SLA"
    text, html = email_parts(breach_mail["agent@acme.test"])
    assert "first response" in text and f'href="/tickets/{ticket_id}"' in html
    assert breach_mail["modir@acme.test"]["subject"].startswith("مهلت تیکت")
    assert '<html lang="fa" dir="rtl">' in email_parts(breach_mail["modir@acme.test"])[1]
    (push,) = sandbox.records("push")
    assert push["decrypt_error"] is None and json.loads(push["payload"])["title"].startswith(f"Ticket #{number}")

    # ---- the agent, in the browser: the breach on the queue, a note, a reply
    page = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB").new_page()
    problems = watch_problems(page)
    login(page, stack.url, "agent@acme.test")
    page.goto(f"{stack.url}/tickets/")
    row = page.locator(f'tr[data-ticket-id="{ticket_id}"]')
    assert "Breached" in row.inner_text()
    shots(page, "queue-breached")
    row.locator("a").first.click()
    page.wait_for_url(f"**/tickets/{ticket_id}")
    page.fill('form[data-action="note"] textarea[name=body]', NOTE)
    page.locator('form[data-action="note"] button[type=submit]').click()
    page.locator('div[data-kind="internal_note"]', has_text="NOTE-7731").wait_for()
    page.fill('form[data-action="reply"] textarea[name=body]', REPLY)
    page.locator('form[data-action="reply"] button[type=submit]').click()
    page.locator('div[data-kind="reply"]', has_text="REPLY-4410").wait_for()
    shots(page, "replied")

    # ---- the customer hears of the reply, in Persian, with a link; never of the note
    link = f"/my/tickets/{ticket_id}"   # the customer's ticket page (issue 43), not the API

    def customer_inbox():
        items = stack.api("GET", "/api/v1/inbox", customer_token).body.get("items", [])
        return [i for i in items if i.get("event_type") == "ticket.message_added"] or None

    (note,) = wait_for(customer_inbox, timeout=30, message="the reply in the customer's inbox")
    assert note["title"] == f"پاسخ تازه در تیکت {number_fa(number)}"
    assert "REPLY-4410" in note["body"] and link in note["body"] and "NOTE-7731" not in json.dumps(note)
    wait_for(lambda: any(r["rcpt_to"] == ["mina@customer.test"] for r in sandbox.records("email")), timeout=30,
             message="the reply's email to the customer")
    (mail,) = [r for r in sandbox.records("email") if r["rcpt_to"] == ["mina@customer.test"]]
    text, html = email_parts(mail)
    assert mail["subject"] == f"پاسخ تازه در تیکت {number_fa(number)}"
    assert "REPLY-4410" in text and f'href="{link}"' in html and '<html lang="fa" dir="rtl">' in html
    everything_sent = json.dumps(sandbox.records(), default=str)
    assert "NOTE-7731" not in everything_sent                 # no email, push or SMS carries the note
    detail = stack.api("GET", f"/api/v1/tickets/{ticket_id}", customer_token).body
    assert [m["kind"] for m in detail["messages"]].count("internal_note") == 0
    assert any("REPLY-4410" in m["body"] for m in detail["messages"])

    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status NOT IN ('succeeded', 'dead') "
                                   "AND NOT (type = 'tickets.sla_check' AND available_at > now())")
                 .fetchone()["n"] == 0, timeout=30, message="every due job finished")
        _assert_rows(c, tenant, ticket_id, agent, admin, customer)
    assert problems == []


def number_fa(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))


def _assert_rows(c, tenant, ticket_id, agent, admin, customer):
    t = c.execute("SELECT * FROM tickets WHERE id = %s", (ticket_id,)).fetchone()
    assert (t["tenant_id"], t["requester_id"], t["priority"], t["subject"]) == (
        tenant["id"], customer["id"], "urgent", SUBJECT)
    assert t["first_response_breached_at"] is not None and t["first_responded_at"] is not None
    assert t["resolution_breached_at"] is None and t["resolved_at"] is None
    assert c.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"] == 1
    assert (t["status"], t["assignee_id"], t["category_id"] is not None) == ("new", None, True)
    msgs = c.execute("SELECT kind, author_id, body FROM ticket_messages WHERE ticket_id = %s ORDER BY created_at, id",
                     (ticket_id,)).fetchall()
    assert [(m["kind"], m["author_id"]) for m in msgs] == [
        ("reply", customer["id"]), ("system", None), ("system", None), ("internal_note", agent["id"]),
        ("reply", agent["id"])], msgs
    assert msgs[1]["body"] == "Ticket #1 opened (urgent)" and msgs[2]["body"].startswith("SLA breached: first response")
    assert (msgs[3]["body"], msgs[4]["body"]) == (NOTE, REPLY)
    assert c.execute("SELECT count(*) AS n FROM ticket_messages").fetchone()["n"] == 5

    jobs = c.execute("SELECT type, status, payload, available_at > now() AS later FROM jobs").fetchall()
    sla = {j["payload"]["kind"]: j for j in jobs if j["type"] == "tickets.sla_check"}
    assert sla["first_response"]["status"] == "succeeded"
    assert (sla["resolution"]["status"], sla["resolution"]["later"]) == ("pending", True)   # due in 4 h
    assert Counter((j["type"], j["status"]) for j in jobs if j["type"] != "tickets.sla_check") == Counter({
        # the breach (inbox, push and email to the team: the fa admin has no device, so no push job),
        # the note (no recipient: no assignee, never the requester), the reply (the customer)
        ("notifications.fanout", "succeeded"): 3, ("notifications.deliver", "succeeded"): 4,
        ("email.send", "succeeded"): 3, ("push.send", "succeeded"): 1}), jobs

    events = c.execute("SELECT type, payload, relayed_at FROM outbox_events ORDER BY occurred_at, id").fetchall()
    assert [(e["type"], e["payload"].get("visibility") or e["payload"].get("kind")) for e in events] == [
        ("ticket.created", None), ("ticket.sla_breached", "first_response"),
        ("ticket.message_added", "internal"), ("ticket.message_added", "public")], events
    assert all(e["relayed_at"] is not None and e["payload"]["ticket_id"] == str(ticket_id) for e in events)

    notes = c.execute("SELECT * FROM notifications").fetchall()
    assert sorted((n["event_type"], n["recipient_id"] == customer["id"], n["locale"]) for n in notes) == [
        ("ticket.message_added", True, "fa"), ("ticket.sla_breached", False, "en"),
        ("ticket.sla_breached", False, "fa")], notes
    for n in notes:
        assert "NOTE-7731" not in n["body"] + n["title"] + json.dumps(n["data"])
        if n["recipient_id"] == customer["id"]:
            assert f"/my/tickets/{ticket_id}" in n["body"] and "REPLY-4410" in n["body"]
        else:
            assert f"View: /tickets/{ticket_id}" in n["body"] or f"مشاهده: /tickets/{ticket_id}" in n["body"]
    deliveries = c.execute("SELECT * FROM notification_deliveries").fetchall()
    assert sorted((d["event_type"], str(d["recipient_id"]), d["channel"]) for d in deliveries) == sorted(
        [("ticket.sla_breached", str(u), ch) for u in (agent["id"], admin["id"]) for ch in ("inbox", "push", "email")]
        + [("ticket.message_added", str(customer["id"]), ch) for ch in ("inbox", "email")])
    for d in deliveries:
        if (d["recipient_id"], d["channel"]) == (admin["id"], "push"):
            assert (d["status"], d["suppression_reason"], d["job_id"]) == ("suppressed", "unreachable", None)
            continue
        assert_delivery_final(d, d["channel"])
        assert d["template_version"] == 1, d

    audit = [(a["action"], a["target_id"]) for a in c.execute("SELECT action, target_id FROM audit_log ORDER BY id")]
    assert audit == [("ticket.create", str(ticket_id)), ("ticket.sla_breach", str(ticket_id)),
                     ("auth.login", str(agent["id"])), ("ticket.note", str(ticket_id)),
                     ("ticket.reply", str(ticket_id))], audit
