"""Notification policies of the ticket events (declared by :func:`declare_policies`).

* ``ticket.assigned`` -> the new assignee.
* ``ticket.status_changed`` -> the requester and the assignee.
* ``ticket.message_added`` -> a public reply: the requester and the assignee, minus the author;
  an internal note: the assignee only (never the requester, whatever the policy says).
* ``ticket.sla_breached`` -> the team: the tenant's active agents (tickets.work).

The requester of a customer ticket is a ``member`` of the tenant (``service.ensure_requester``
with the tenant, ``opsboard user-token --tenant``), so the notifications' ``membership`` rule lets
their deliveries through; a requester whose membership is deactivated is suppressed (``membership``).

What they say: :func:`ticket_variables` gives every template the ticket's number, subject and status
and a ``link`` path -- ``/tickets/<id>`` (the dashboard) for agents, ``/my/tickets/<id>`` (the
customer's own ticket page, :mod:`opsboard.web.portal`) for the requester -- read inside the event's tenant
only; a message event adds the message's first lines (``excerpt``), never an internal note's for the
requester.  :data:`TEMPLATES` are the shipped fa and en texts of each channel of each policy
(registered by :func:`ship_templates`, seeded by ``opsboard migrate`` and at start).
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


#: Characters of a message shown in its notification.
EXCERPT_CHARS = 280


def ticket_variables(conn, event, user_id) -> dict:
    """The template variables of one recipient of a ticket event (see the module docstring)."""
    payload = event["payload"]
    t = db.one(conn, "ticket_notify_variables", {"id": payload["ticket_id"], "tenant_id": event["tenant_id"]})
    if t is None:  # not this tenant's ticket (or gone): say nothing about it
        return {"ticket_number": "", "ticket_subject": "", "ticket_status": "", "link": "", "excerpt": ""}
    requester = str(user_id) == str(t["requester_id"])
    out = {"ticket_number": t["number"], "ticket_subject": t["subject"], "ticket_status": t["status"],
           "link": f"/my/tickets/{t['id']}" if requester else f"/tickets/{t['id']}", "excerpt": ""}
    if event["type"] == "ticket.message_added" and payload.get("message_id"):
        m = db.one(conn, "ticket_message_notify_excerpt", {"id": payload["message_id"],
                                                           "tenant_id": event["tenant_id"], "limit": EXCERPT_CHARS})
        internal = payload.get("visibility") == "internal" or (m is not None and m["kind"] == "internal_note")
        if m is not None and not (internal and requester):
            out["excerpt"] = m["excerpt"] + ("…" if m["truncated"] else "")
    return out


def declare_policies(cat) -> None:
    """Who hears of which ticket event (see the module docstring)."""
    policy.declare(cat, "ticket.assigned", category="ticket", channels=("inbox", "email"), recipients=_assignee,
                   permission="tickets.view", variables=ticket_variables)
    policy.declare(cat, "ticket.status_changed", category="ticket", channels=("inbox", "email"),
                   recipients=_requester_and_assignee, variables=ticket_variables)
    policy.declare(cat, "ticket.message_added", category="ticket", channels=("inbox", "email"),
                   recipients=_message_recipients, variables=ticket_variables)
    policy.declare(cat, "ticket.sla_breached", category="ticket", channels=("inbox", "push", "email"),
                   recipients=_team, permission="tickets.work", variables=ticket_variables)


# ---------------------------------------------------------------- shipped templates

_STATUS_FA = ("{% set labels = {'new': 'جدید', 'triaged': 'بررسی‌شده', 'in_progress': 'در حال انجام', "
              "'waiting_on_customer': 'در انتظار پاسخ درخواست‌کننده', 'resolved': 'حل‌شده', 'closed': 'بسته', "
              "'cancelled': 'لغوشده'} %}")
_STATUS_EN = ("{% set labels = {'new': 'new', 'triaged': 'triaged', 'in_progress': 'in progress', "
              "'waiting_on_customer': 'waiting on the requester', 'resolved': 'resolved', 'closed': 'closed', "
              "'cancelled': 'cancelled'} %}")
_LABEL = "{{ labels[to_status] if to_status in labels else to_status }}"
_COMMON = "ticket_number, ticket_subject, link"

#: (key, channel, locale, subject, body, variables): the shipped texts of the ticket events.
TEMPLATES = [
    ("ticket.assigned", "inbox", "fa", "تیکت {{ ticket_number|fa_digits }} به شما واگذار شد",
     "«{{ ticket_subject }}» اکنون با شماست. مشاهده: {{ link }}", _COMMON),
    ("ticket.assigned", "inbox", "en", "Ticket #{{ ticket_number }} was assigned to you",
     "“{{ ticket_subject }}” is yours now. View: {{ link }}", _COMMON),
    ("ticket.assigned", "email", "fa", "تیکت {{ ticket_number|fa_digits }} به شما واگذار شد",
     "<p>تیکت <b>{{ ticket_number|fa_digits }}</b> «{{ ticket_subject }}» اکنون با شماست.</p>"
     "<p><a href=\"{{ link }}\">مشاهدهٔ تیکت</a></p>", _COMMON),
    ("ticket.assigned", "email", "en", "Ticket #{{ ticket_number }} was assigned to you",
     "<p>Ticket <b>#{{ ticket_number }}</b> “{{ ticket_subject }}” is yours now.</p>"
     "<p><a href=\"{{ link }}\">View the ticket</a></p>", _COMMON),

    ("ticket.status_changed", "inbox", "fa", "وضعیت تیکت {{ ticket_number|fa_digits }} تغییر کرد",
     _STATUS_FA + "«{{ ticket_subject }}» اکنون " + _LABEL + " است. مشاهده: {{ link }}",
     _COMMON + ", to_status"),
    ("ticket.status_changed", "inbox", "en", "Ticket #{{ ticket_number }} changed status",
     _STATUS_EN + "“{{ ticket_subject }}” is now " + _LABEL + ". View: {{ link }}", _COMMON + ", to_status"),
    ("ticket.status_changed", "email", "fa", "وضعیت تیکت {{ ticket_number|fa_digits }} تغییر کرد",
     _STATUS_FA + "<p>تیکت <b>{{ ticket_number|fa_digits }}</b> «{{ ticket_subject }}» اکنون <b>" + _LABEL
     + "</b> است.</p><p><a href=\"{{ link }}\">مشاهدهٔ تیکت</a></p>", _COMMON + ", to_status"),
    ("ticket.status_changed", "email", "en", "Ticket #{{ ticket_number }} changed status",
     _STATUS_EN + "<p>Ticket <b>#{{ ticket_number }}</b> “{{ ticket_subject }}” is now <b>" + _LABEL
     + "</b>.</p><p><a href=\"{{ link }}\">View the ticket</a></p>", _COMMON + ", to_status"),

    ("ticket.message_added", "inbox", "fa",
     "{% if visibility == 'internal' %}یادداشت داخلی{% else %}پاسخ تازه{% endif %} در تیکت "
     "{{ ticket_number|fa_digits }}",
     "«{{ ticket_subject }}»: {{ excerpt }} مشاهده: {{ link }}", _COMMON + ", visibility, excerpt"),
    ("ticket.message_added", "inbox", "en",
     "{% if visibility == 'internal' %}Internal note{% else %}New reply{% endif %} on ticket #{{ ticket_number }}",
     "“{{ ticket_subject }}”: {{ excerpt }} View: {{ link }}", _COMMON + ", visibility, excerpt"),
    ("ticket.message_added", "email", "fa",
     "{% if visibility == 'internal' %}یادداشت داخلی{% else %}پاسخ تازه{% endif %} در تیکت "
     "{{ ticket_number|fa_digits }}",
     "<p>در تیکت <b>{{ ticket_number|fa_digits }}</b> «{{ ticket_subject }}»:</p>"
     "<blockquote>{{ excerpt }}</blockquote><p><a href=\"{{ link }}\">مشاهده و پاسخ</a></p>",
     _COMMON + ", visibility, excerpt"),
    ("ticket.message_added", "email", "en",
     "{% if visibility == 'internal' %}Internal note{% else %}New reply{% endif %} on ticket #{{ ticket_number }}",
     "<p>On ticket <b>#{{ ticket_number }}</b> “{{ ticket_subject }}”:</p>"
     "<blockquote>{{ excerpt }}</blockquote><p><a href=\"{{ link }}\">View and reply</a></p>",
     _COMMON + ", visibility, excerpt"),

    ("ticket.sla_breached", "inbox", "fa", "مهلت تیکت {{ ticket_number|fa_digits }} گذشت",
     "مهلت {% if kind == 'first_response' %}نخستین پاسخ{% else %}حل{% endif %} «{{ ticket_subject }}» "
     "گذشته است. مشاهده: {{ link }}", _COMMON + ", kind"),
    ("ticket.sla_breached", "inbox", "en", "Ticket #{{ ticket_number }} breached its SLA",
     "The {% if kind == 'first_response' %}first response{% else %}resolution{% endif %} due time of "
     "“{{ ticket_subject }}” has passed. View: {{ link }}", _COMMON + ", kind"),
    ("ticket.sla_breached", "push", "fa", "مهلت تیکت {{ ticket_number|fa_digits }} گذشت",
     "مهلت {% if kind == 'first_response' %}نخستین پاسخ{% else %}حل{% endif %} گذشته است.",
     "ticket_number, kind"),
    ("ticket.sla_breached", "push", "en", "Ticket #{{ ticket_number }} breached its SLA",
     "The {% if kind == 'first_response' %}first response{% else %}resolution{% endif %} due time has passed.",
     "ticket_number, kind"),
    ("ticket.sla_breached", "email", "fa", "مهلت تیکت {{ ticket_number|fa_digits }} گذشت",
     "<p>مهلت {% if kind == 'first_response' %}نخستین پاسخ{% else %}حل{% endif %} تیکت "
     "<b>{{ ticket_number|fa_digits }}</b> «{{ ticket_subject }}» گذشته است.</p>"
     "<p><a href=\"{{ link }}\">مشاهدهٔ تیکت</a></p>", _COMMON + ", kind"),
    ("ticket.sla_breached", "email", "en", "Ticket #{{ ticket_number }} breached its SLA",
     "<p>The {% if kind == 'first_response' %}first response{% else %}resolution{% endif %} due time of ticket "
     "<b>#{{ ticket_number }}</b> “{{ ticket_subject }}” has passed.</p>"
     "<p><a href=\"{{ link }}\">View the ticket</a></p>", _COMMON + ", kind"),
]

#: The preview sample of every shipped ticket template.
SAMPLE = {"ticket_number": 1042, "ticket_subject": "Refund not received", "ticket_status": "in_progress",
          "link": "/tickets/01900000-0000-7000-8000-000000000000", "to_status": "waiting_on_customer",
          "visibility": "public", "excerpt": "We have sent the refund again; please check tomorrow.",
          "kind": "first_response"}


def ship_templates(cat) -> None:
    """Register :data:`TEMPLATES` in the catalogue (seeded where missing by ``opsboard migrate`` and at start)."""
    for key, channel, locale, subject, body, variables in TEMPLATES:
        names = [v.strip() for v in variables.split(",")]
        cat.ship_template(key, channel, locale, subject, body, variables, {n: SAMPLE[n] for n in names})
