"""The event catalogue: every event type, its versions and upcasters, and
every subscription (event type -> job type).  This is the one place to read
what happens when an event is published, and the one place to rewire it.

The subscribers here are the demo domain's (:mod:`opsboard.demo_domain`):
``webhooks`` sends every event to the tenant's subscribed webhook endpoints
(``webhook.fanout``: one signed delivery per endpoint); email, SMS and push to
people go through the notification policies (``notify``, declared in
:mod:`opsboard.notifications.demo_policies`), which check preferences,
membership, quiet hours and sensitivity first.  The ``outbox_demo.*`` job
types are the demo application's own consumers (a CRM sync, a partner
ledger, the nightly report): they record their effect in ``demo_effects``.
"""
from __future__ import annotations

from datetime import timedelta

from .jobtypes import define
from .outbox import EventField, define_event, define_upcaster, subscribe

# ------------------------------------------------------------ event types

define_event("user.signed_up", 1, aggregate="user", fields={"user_id": EventField(str, max_length=64)},
             description="A user of a tenant signed up (v1: before plans existed).")
define_event("user.signed_up", 2, aggregate="user",
             fields={"user_id": EventField(str, max_length=64),
                     "plan": EventField(str, choices=("free", "pro", "enterprise"))},
             description="A user of a tenant signed up, with the plan chosen.")
define_upcaster("user.signed_up", 1, lambda p: {**p, "plan": "free"})

define_event("order.paid", 1, aggregate="order",
             fields={"order_id": EventField(str, max_length=64), "user_id": EventField(str, required=False,
                                                                                        max_length=64),
                     "amount_cents": EventField(int), "currency": EventField(str, max_length=3)},
             description="An order was paid.")

define_event("otp.requested", 1, aggregate="otp",
             fields={"otp_id": EventField(str, max_length=64)},
             description="A one-time password was requested; the SMS must arrive within 2 minutes.")

# ------------------------------------------------------------ demo job types

# One handler records each subscriber's effect (worker/handlers/outbox_demo.py).
_RECORD = "worker.handlers.outbox_demo:record_effect"
define("outbox_demo.email", handler=_RECORD, max_attempts=5, timeout=10,
       description="Demo stand-in for email.send: records the effect.")
define("outbox_demo.webhook", handler=_RECORD, max_attempts=8, timeout=10,
       description="Demo stand-in for webhook.fanout: records the effect.")
define("outbox_demo.sms", handler=_RECORD, queue="critical", priority=0, max_attempts=3, timeout=5,
       description="Demo stand-in for sms.send: records the effect.")
define("outbox_demo.report_row", handler=_RECORD, queue="bulk", max_attempts=5, timeout=10,
       description="Demo: includes the signup in the nightly report.")

# ------------------------------------------------------------ subscriptions

def _webhook_fanout(event: dict) -> dict:
    return {"event_id": str(event["id"])}


# Real deliveries: every event to the tenant's webhook endpoints subscribed to its type.
subscribe("webhooks", "user.signed_up", "webhook.fanout", version=2, payload=_webhook_fanout)
subscribe("webhooks", "order.paid", "webhook.fanout", payload=_webhook_fanout)

# The demo application's own consumers (recorded in demo_effects).
subscribe("welcome_email", "user.signed_up", "outbox_demo.email", version=2)
subscribe("crm_webhook", "user.signed_up", "outbox_demo.webhook", version=2, ordered=True)
subscribe("nightly_report", "user.signed_up", "outbox_demo.report_row", version=2)

subscribe("partner_webhook", "order.paid", "outbox_demo.webhook", ordered=True)
subscribe("receipt_email", "order.paid", "outbox_demo.email")

subscribe("otp_sms", "otp.requested", "outbox_demo.sms", queue="critical", expires_in=timedelta(minutes=2))

# ------------------------------------------------------------ tickets (opsboard.tickets.service)

_TICKET = {"ticket_id": EventField(str, max_length=64)}
define_event("ticket.created", 1, aggregate="ticket",
             fields={**_TICKET, "priority": EventField(str, choices=("low", "normal", "high", "urgent"))},
             description="A support ticket was opened.")
define_event("ticket.status_changed", 1, aggregate="ticket",
             fields={**_TICKET, "action": EventField(str, max_length=40), "from_status": EventField(str, max_length=40),
                     "to_status": EventField(str, max_length=40)},
             description="A ticket moved through its workflow (triage, resolve, reopen...).")
define_event("ticket.assigned", 1, aggregate="ticket",
             fields={**_TICKET, "assignee_id": EventField(str, max_length=64)},
             description="A ticket was assigned (assignee_id) or unassigned (empty).")
define_event("ticket.message_added", 1, aggregate="ticket",
             fields={**_TICKET, "message_id": EventField(str, max_length=64),
                     "visibility": EventField(str, choices=("public", "internal"))},
             description="A reply (public) or an internal note (internal: never for the requester).")
define_event("ticket.decided", 1, aggregate="ticket",
             fields={**_TICKET, "decision": EventField(str, choices=("approved", "rejected"))},
             description="A request-type ticket was approved or rejected.")
define_event("ticket.priority_changed", 1, aggregate="ticket",
             fields={**_TICKET, "priority": EventField(str, choices=("low", "normal", "high", "urgent"))},
             description="A ticket's priority changed; its due times were recomputed.")
define_event("ticket.sla_breached", 1, aggregate="ticket",
             fields={**_TICKET, "kind": EventField(str, choices=("first_response", "resolution")),
                     "team": EventField(str, max_length=100)},
             description="A ticket passed a due time (the breach job at the due time).")


# ------------------------------------------------------------ notification policies

# Each declare() also subscribes its event type to notifications.fanout (subscriber "notify").
from .notifications import demo_policies  # noqa: E402,F401
from .tickets import notify as _ticket_notify  # noqa: E402,F401  (the ticket events' policies)
