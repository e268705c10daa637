"""Ticket events through the notification policies: agents, and requesters (members of the tenant)."""
from __future__ import annotations

import pytest

from opsboard.tickets import service
from tests.support.tickets import make_desk

policy = pytest.importorskip("opsboard.notifications.policy")
from opsboard.notifications import fanout  # noqa: E402


def _events(conn, ticket_id, type_):
    return [r["id"] for r in conn.execute("SELECT id FROM outbox_events WHERE aggregate_id = %s AND type = %s ORDER BY id",
                                          (str(ticket_id), type_)).fetchall()]


def _inbox(conn, user_id):
    return conn.execute("SELECT * FROM notifications WHERE recipient_id = %s", (user_id,)).fetchall()


def _deliveries(conn, user_id, event_id):
    return {(d["channel"], d["status"], d["suppression_reason"]) for d in conn.execute(
        "SELECT channel, status, suppression_reason FROM notification_deliveries WHERE recipient_id = %s AND event_id = %s",
        (user_id, event_id)).fetchall()}


def test_assignee_notified_internal_note_never_to_requester(conn):
    desk = make_desk(conn)
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="S", body="B")
    service.act(conn, t["id"], "assign", desk.caller("admin"), scope=desk.scope, fields={"assignee_id": desk.agent.id})
    c = fanout.fan_out(conn, _events(conn, t["id"], "ticket.assigned")[0])
    assert c["recipients"] == 1 and len(_inbox(conn, desk.agent.id)) == 1
    service.act(conn, t["id"], "note", desk.caller("admin"), scope=desk.scope, fields={"body": "secret"})
    ev = _events(conn, t["id"], "ticket.message_added")[0]
    assert policy.policy_for("ticket.message_added").recipients(conn, fanout.load_event(conn, ev)) == [desk.agent.id]
    fanout.fan_out(conn, ev)
    assert _inbox(conn, desk.requester["id"]) == []
    assert len(_inbox(conn, desk.agent.id)) == 2


def test_requester_gets_an_inbox_row_for_a_public_reply_never_for_an_internal_note(conn):
    desk = make_desk(conn)  # the requester is made a ``member`` of the tenant by ensure_requester
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="S", body="B")
    service.act(conn, t["id"], "note", desk.caller("support_agent"), scope=desk.scope, fields={"body": "secret"})
    note_ev = _events(conn, t["id"], "ticket.message_added")[-1]
    fanout.fan_out(conn, note_ev)
    assert _inbox(conn, desk.requester["id"]) == []
    service.act(conn, t["id"], "reply", desk.caller("support_agent"), scope=desk.scope, fields={"body": "on it"})
    reply_ev = _events(conn, t["id"], "ticket.message_added")[-1]
    assert reply_ev != note_ev
    fanout.fan_out(conn, reply_ev)
    rows = _inbox(conn, desk.requester["id"])
    assert [r["event_id"] for r in rows] == [reply_ev]
    assert _deliveries(conn, desk.requester["id"], reply_ev) == {("inbox", "delivered", None),
                                                                 ("email", "queued", None)}
    assert _deliveries(conn, desk.requester["id"], note_ev) == set()  # not even a suppressed row


def test_a_requester_without_membership_is_suppressed_by_the_membership_rule(conn):
    """Why requesters get ``member``: without it the policy drops their notification."""
    desk = make_desk(conn)
    conn.execute("UPDATE memberships SET active = false WHERE user_id = %s", (desk.requester["id"],))
    t = service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="S", body="B")
    service.act(conn, t["id"], "reply", desk.caller("support_agent"), scope=desk.scope, fields={"body": "on it"})
    ev = _events(conn, t["id"], "ticket.message_added")[-1]
    fanout.fan_out(conn, ev)
    assert _inbox(conn, desk.requester["id"]) == []
    assert _deliveries(conn, desk.requester["id"], ev) == {("inbox", "suppressed", "membership"),
                                                           ("email", "suppressed", "membership")}
