"""Ticket events through the notification policies (needs the notifications branch)."""
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
