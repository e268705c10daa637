"""What a customer sees of their own ticket on the web (/my/tickets, :mod:`opsboard.web.portal`).

The rules are the customer API's (:mod:`opsboard.web.api.tickets`): the tenant is the one of the
user's active membership (:func:`.service.customer_tenant`), a ticket is theirs only when they are its
requester inside that tenant (anything else reads as "no such ticket"), the conversation comes from
the public queries (never an internal note or its attachment), and every action goes through
:func:`.service.act` with no agent role, so the workflow's ``requester`` column decides.

What a customer is told of the SLA is a promise, not the agents' badge: :func:`promise`.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from .. import db
from ..auth import TenantScope
from . import service, workflow


def bucket_name(user_id) -> str:
    """The customer's write bucket (``rate_limits``, :func:`opsboard.backpressure.take_token`)."""
    return f"portal:{user_id}"


class PortalBucketSweeper:
    """The leader's sweep of the customers' write buckets that are full again (one row per customer who
    wrote; a full bucket is the same as none).  Contributed through ``catalogue.services``."""

    name = "portal_buckets"

    def __init__(self, interval: float = 300.0, batch: int = 10_000):
        self.interval, self.batch = interval, batch

    def run_once(self, conn, now: datetime | None = None) -> int:
        return len(db.all_rows(conn, "rate_limit_portal_prune_full", {"now": now, "limit": self.batch}))


def scope(tenant_id) -> TenantScope:
    """The one tenant a customer acts in, as a scope for the service's queries."""
    return TenantScope(all=False, ids=(uuid.UUID(str(tenant_id)),))


def own_ticket(conn, tenant_id, user_id, ticket_id) -> dict | None:
    """The ticket when ``user_id`` is its requester inside ``tenant_id``; else None (another
    customer's ticket, another tenant's, an agent's internal one, or none: one answer, 404)."""
    t = service.get_ticket(conn, scope(tenant_id), ticket_id)
    if t is None or t["requester_id"] != uuid.UUID(str(user_id)):
        return None
    return t


def own_tickets(conn, tenant_id, user_id, *, after_id=None, limit: int = 50) -> list[dict]:
    """The requester's tickets in their tenant, newest first (keyset on id; the API's query)."""
    return db.all_rows(conn, "ticket_list_for_requester", {"tenant_id": tenant_id, "requester_id": user_id,
                                                           "after_id": after_id, "limit": limit})


def customer_actions(ticket: dict, now: datetime | None = None) -> list[str]:
    """The actions the requester may take on ``ticket`` now: the workflow's, with the reopen window
    checked here too so the page offers no button the service would refuse."""
    now = now or datetime.now(timezone.utc)
    out = []
    for action in workflow.allowed(ticket["status"], "requester"):
        if action == "resume":
            continue  # a customer resumes by replying (service.act turns the reply into a resume)
        if action == "reopen" and (ticket["resolved_at"] is None
                                   or now > ticket["resolved_at"] + workflow.REOPEN_WINDOW):
            continue
        out.append(action)
    return out


@dataclass(frozen=True)
class Promise:
    """What the ticket page tells the customer about time.

    ``kind``: ``answer_by`` (no agent answered yet: first-response due time), ``resolve_by`` (answered,
    still open: resolution due time), ``late`` (that due time passed: no breach badge, an apology),
    ``your_turn`` (waiting on the customer: the clock is stopped), ``open`` (no SLA policy: no time
    promised), ``resolved`` (``at`` = resolved, ``until`` = the end of the reopen window, or None when
    it passed), ``closed`` (closed or cancelled).
    """

    kind: str
    at: datetime | None = None
    until: datetime | None = None


def promise(ticket: dict, now: datetime | None = None) -> Promise:
    """The customer's view of the SLA clock of ``ticket`` at ``now`` (see :class:`Promise`)."""
    now = now or datetime.now(timezone.utc)
    status = ticket["status"]
    if status in ("closed", "cancelled"):
        return Promise("closed", ticket.get("closed_at") or ticket.get("updated_at"))
    if status == "resolved":
        resolved = ticket["resolved_at"]
        until = resolved + workflow.REOPEN_WINDOW if resolved else None
        return Promise("resolved", resolved, until if until and now <= until else None)
    if status == "waiting_on_customer" or ticket.get("paused_at") is not None:
        return Promise("your_turn")
    if ticket["first_responded_at"] is None and ticket["first_response_due_at"] is not None:
        due, kind = ticket["first_response_due_at"], "answer_by"
    elif ticket["resolution_due_at"] is not None:
        due, kind = ticket["resolution_due_at"], "resolve_by"
    else:
        return Promise("open")
    return Promise("late" if now > due else kind, due)
