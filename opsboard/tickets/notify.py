"""Notification policies of the ticket events (declared by :func:`declare_policies`).

* ``ticket.assigned`` -> the new assignee.
* ``ticket.status_changed`` -> the requester and the assignee.
* ``ticket.message_added`` -> a public reply: the requester and the assignee, minus the author;
  an internal note: the assignee only (never the requester, whatever the policy says).
* ``ticket.sla_breached`` -> the team: the tenant's active agents (tickets.work).

The requester of a customer ticket is a ``member`` of the tenant (``service.ensure_requester``
with the tenant, ``opsboard user-token --tenant``), so the notifications' ``membership`` rule lets
their deliveries through; a requester whose membership is deactivated is suppressed (``membership``).
"""
from __future__ import annotations

from .. import db
from ..notifications import policy


def _ticket(conn, event) -> dict | None:
    return db.one(conn, "ticket_notify_facts", {"id": event["payload"]["ticket_id"]})


def _assignee(conn, event):
    t = _ticket(conn, event)
    return [t["assignee_id"]] if t and t["assignee_id"] else []


def _requester_and_assignee(conn, event):
    t = _ticket(conn, event)
    return [u for u in (t["requester_id"], t["assignee_id"]) if u] if t else []


def _message_recipients(conn, event):
    t = _ticket(conn, event)
    if not t:
        return []
    author = db.one(conn, "ticket_message_author", {"id": event["payload"]["message_id"]})
    wanted = [t["assignee_id"]] if event["payload"].get("visibility") == "internal" else \
        [t["requester_id"], t["assignee_id"]]
    return [u for u in wanted if u and (author is None or u != author["author_id"])]


def _team(conn, event):
    return [a["id"] for a in db.all_rows(conn, "ticket_agents_of_tenant", {"tenant_id": event["tenant_id"]})]


def declare_policies(cat) -> None:
    """Who hears of which ticket event (see the module docstring)."""
    policy.declare(cat, "ticket.assigned", category="ticket", channels=("inbox", "email"), recipients=_assignee,
                   permission="tickets.view")
    policy.declare(cat, "ticket.status_changed", category="ticket", channels=("inbox", "email"),
                   recipients=_requester_and_assignee)
    policy.declare(cat, "ticket.message_added", category="ticket", channels=("inbox", "email"),
                   recipients=_message_recipients)
    policy.declare(cat, "ticket.sla_breached", category="ticket", channels=("inbox", "push", "email"),
                   recipients=_team, permission="tickets.work")
