"""Support tickets: the workflow (:mod:`.workflow`), the SLA clock (:mod:`.sla`) and the
service every caller goes through (:mod:`.service`).  See docs/tickets.md."""

from __future__ import annotations

import uuid


def register(cat) -> None:
    """The ticket feature: its events, its job type and the policies that notify people of them.

    Imports inside: ``opsboard.tickets.sla`` and ``.workflow`` stay pure modules to import.
    """
    from ..outbox import EventField, define_event
    from . import notify, service, workflow

    _TICKET = {"ticket_id": EventField(uuid.UUID)}
    define_event(cat, "ticket.created", 1, aggregate="ticket",
                 fields={**_TICKET, "priority": EventField(str, choices=workflow.PRIORITIES)},
                 description="A support ticket was opened.")
    define_event(cat, "ticket.status_changed", 1, aggregate="ticket",
                 fields={**_TICKET, "action": EventField(str, max_length=40), "from_status": EventField(str, choices=workflow.STATUSES),
                         "to_status": EventField(str, choices=workflow.STATUSES)},
                 description="A ticket moved through its workflow (triage, resolve, reopen...).")
    define_event(cat, "ticket.assigned", 1, aggregate="ticket",
                 fields={**_TICKET, "assignee_id": EventField(uuid.UUID, required=False)},
                 description="A ticket was assigned (assignee_id) or unassigned (assignee_id null).")
    define_event(cat, "ticket.message_added", 1, aggregate="ticket",
                 fields={**_TICKET, "message_id": EventField(uuid.UUID),
                         "visibility": EventField(str, choices=("public", "internal"))},
                 description="A reply (public) or an internal note (internal: never for the requester).")
    define_event(cat, "ticket.decided", 1, aggregate="ticket",
                 fields={**_TICKET, "decision": EventField(str, choices=workflow.DECISIONS)},
                 description="A request-type ticket was approved or rejected.")
    define_event(cat, "ticket.priority_changed", 1, aggregate="ticket",
                 fields={**_TICKET, "priority": EventField(str, choices=workflow.PRIORITIES)},
                 description="A ticket's priority changed; its due times were recomputed.")
    define_event(cat, "ticket.sla_breached", 1, aggregate="ticket",
                 fields={**_TICKET, "kind": EventField(str, choices=("first_response", "resolution")),
                         "team": EventField(str, max_length=100)},
                 description="A ticket passed a due time (the breach job at the due time).")

    service.define_types(cat)
    service.define_sla_report(cat)
    notify.declare_policies(cat)
    notify.ship_templates(cat)
    # A customer's own ticket pages (issue 43): linked for end users, who hold inbox.view.
    cat.add_page("my_tickets", "opsboard.web.portal:bp", endpoint="portal.index", permission="inbox.view",
                 labels={"fa": "تیکت‌های من", "en": "My tickets"})
    from . import portal
    cat.services["portal_buckets"] = lambda config: portal.PortalBucketSweeper()
