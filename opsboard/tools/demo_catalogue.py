"""The demo plug-in's catalogue: its events, job types, subscriptions, notification policies
and templates.  Registered only by ``opsboard demo`` (and by the tests that exercise the
outbox and notifications with the demo domain): a production process has none of it.

* events: ``user.signed_up`` (v1, v2 and the upcaster between), ``order.paid``, ``otp.requested``;
* ``webhooks``: the demo events go to the tenant's subscribed webhook endpoints (``webhook.fanout``);
* the ``outbox_demo.*`` job types are the demo application's own consumers (a CRM sync, a partner
  ledger, the nightly report): they record their effect in ``demo_effects``
  (:func:`opsboard.tools.demo_handlers.record_effect`);
* policies: ``user.signed_up`` -> the tenant's admins (inbox + email, ``account``); ``order.paid``
  -> the order's user (inbox, push, email, sms; ``financial``, sensitive); ``otp.requested`` ->
  the users whose phone is the OTP's (inbox + SMS, ``otp``: critical);
* ``demo.*`` job types: the synthetic traffic of ``opsboard demo`` (handler times and failure rates).

Its tables and queries are the demo domain's (:mod:`opsboard.tools.demo_domain`); its handlers
are named by string and resolved by the worker.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from .. import db
from ..jobtypes import Field, define, define_provider
from ..notifications import policy
from ..outbox import EventField, define_event, define_upcaster, subscribe
from . import demo_domain


def _webhook_fanout(event: dict) -> dict:
    return {"event_id": str(event["id"])}


def _admins(conn, event):
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["admin"]})]


def _order_recipients(conn, event):
    try:
        order_id = uuid.UUID(str(event["payload"].get("order_id")))
    except ValueError:
        return []  # not an order of the demo domain (the delivery demo publishes raw events)
    row = demo_domain.one(conn, "demo_order_recipient", {"order_id": order_id})
    if row is not None:
        return [row["user_id"]]
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["member"]})]


def _otp_recipients(conn, event):
    try:
        uuid.UUID(str(event["payload"].get("otp_id")))
    except ValueError:
        return []
    rows = demo_domain.all_rows(conn, "demo_otp_recipient", {"otp_id": event["payload"]["otp_id"]})
    return [r["user_id"] for r in rows]


def _otp_variables(conn, event, user_id):
    rows = demo_domain.all_rows(conn, "demo_otp_recipient", {"otp_id": event["payload"]["otp_id"]})
    return {"code": rows[0]["code"] if rows else "", "minutes": 2}



#: (key, channel, locale, subject, body, variables): the demo's published templates.
DEMO_TEMPLATES = [
    ("user.signed_up", "inbox", "fa", "کاربر جدید ثبت‌نام کرد", "یک کاربر با طرح {{ plan }} ثبت‌نام کرد.", "plan"),
    ("user.signed_up", "inbox", "en", "New sign-up", "A user signed up on the {{ plan }} plan.", "plan"),
    ("user.signed_up", "email", "fa", "کاربر جدید",
     "<p>یک کاربر با طرح <b>{{ plan|ltr }}</b> ثبت‌نام کرد.</p>", "plan"),
    ("user.signed_up", "email", "en", "New sign-up", "<p>A user signed up on the <b>{{ plan }}</b> plan.</p>",
     "plan"),
    # Amounts carry a currency code (IRR): a left-to-right island in Persian text (issue 43).
    ("order.paid", "inbox", "fa", "پرداخت سفارش",
     "مبلغ {{ amount_cents|money(currency)|fa_digits|ltr }} پرداخت شد.", "amount_cents, currency"),
    ("order.paid", "inbox", "en", "Order paid", "{{ amount_cents|money(currency) }} was paid.",
     "amount_cents, currency"),
    ("order.paid", "push", "fa", "پرداخت موفق",
     "مبلغ {{ amount_cents|money(currency)|fa_digits|ltr }} پرداخت شد.", "amount_cents, currency"),
    ("order.paid", "push", "en", "Payment received", "{{ amount_cents|money(currency) }} was paid.",
     "amount_cents, currency"),
    ("order.paid", "email", "fa", "رسید پرداخت",
     "<p>مبلغ <b>{{ amount_cents|money(currency)|fa_digits|ltr }}</b> پرداخت شد.</p>", "amount_cents, currency"),
    ("order.paid", "email", "en", "Payment receipt",
     "<p><b>{{ amount_cents|money(currency) }}</b> was paid.</p>", "amount_cents, currency"),
    ("order.paid", "sms", "fa", "", "پرداخت {{ amount_cents|money(currency)|fa_digits|ltr }} انجام شد.",
     "amount_cents, currency"),
    ("order.paid", "sms", "en", "", "Payment of {{ amount_cents|money(currency) }} received.",
     "amount_cents, currency"),
    ("otp.requested", "inbox", "fa", "کد ورود ارسال شد", "یک کد یک‌بار مصرف به تلفن شما پیامک شد.", ""),
    ("otp.requested", "inbox", "en", "Sign-in code sent", "A one-time code was sent to your phone.", ""),
    ("otp.requested", "sms", "fa", "", "کد شما: {{ code|fa_digits }} (تا {{ minutes|fa_digits }} دقیقه معتبر)",
     "code, minutes"),
    ("otp.requested", "sms", "en", "", "Your code: {{ code }} (valid {{ minutes }} minutes)", "code, minutes"),
]


def register(cat) -> None:
    """Everything the demo adds to a catalogue (see the module docstring)."""
    # ------------------------------------------------------------ event types

    define_event(cat, "user.signed_up", 1, aggregate="user", fields={"user_id": EventField(str, max_length=64)},
                 description="A user of a tenant signed up (v1: before plans existed).")
    define_event(cat, "user.signed_up", 2, aggregate="user",
                 fields={"user_id": EventField(str, max_length=64),
                         "plan": EventField(str, choices=("free", "pro", "enterprise"))},
                 description="A user of a tenant signed up, with the plan chosen.")
    define_upcaster(cat, "user.signed_up", 1, lambda p: {**p, "plan": "free"})

    define_event(cat, "order.paid", 1, aggregate="order",
                 fields={"order_id": EventField(str, max_length=64), "user_id": EventField(str, required=False,
                                                                                            max_length=64),
                         "amount_cents": EventField(int), "currency": EventField(str, max_length=3)},
                 description="An order was paid.")

    define_event(cat, "otp.requested", 1, aggregate="otp",
                 fields={"otp_id": EventField(str, max_length=64)},
                 description="A one-time password was requested; the SMS must arrive within 2 minutes.")

    # ------------------------------------------------------------ demo job types

    # The demo application's own consumers: one handler records each subscriber's effect
    # (opsboard/tools/demo_handlers.py).
    _RECORD = "opsboard.tools.demo_handlers:record_effect"
    define(cat, "outbox_demo.email", handler=_RECORD, max_attempts=5, timeout=10,
           description="The demo application's emails (welcome, receipt): records the effect.")
    define(cat, "outbox_demo.webhook", handler=_RECORD, max_attempts=8, timeout=10,
           description="The demo application's CRM and partner webhooks: records the effect.")
    define(cat, "outbox_demo.sms", handler=_RECORD, queue="critical", priority=0, max_attempts=3, timeout=5,
           description="The demo application's sign-in SMS: records the effect.")
    define(cat, "outbox_demo.report_row", handler=_RECORD, queue="bulk", max_attempts=5, timeout=10,
           description="Demo: includes the signup in the nightly report.")

    # ------------------------------------------------------------ subscriptions

    # Real deliveries: every event to the tenant's webhook endpoints subscribed to its type.
    subscribe(cat, "webhooks", "user.signed_up", "webhook.fanout", version=2, payload=_webhook_fanout)
    subscribe(cat, "webhooks", "order.paid", "webhook.fanout", payload=_webhook_fanout)

    # The demo application's own consumers (recorded in demo_effects).
    subscribe(cat, "welcome_email", "user.signed_up", "outbox_demo.email", version=2)
    subscribe(cat, "crm_webhook", "user.signed_up", "outbox_demo.webhook", version=2, ordered=True)
    subscribe(cat, "nightly_report", "user.signed_up", "outbox_demo.report_row", version=2)

    subscribe(cat, "partner_webhook", "order.paid", "outbox_demo.webhook", ordered=True)
    subscribe(cat, "receipt_email", "order.paid", "outbox_demo.email")

    subscribe(cat, "otp_sms", "otp.requested", "outbox_demo.sms", queue="critical", expires_in=timedelta(minutes=2))

    policy.declare(cat, "user.signed_up", category="account", channels=("inbox", "email"), recipients=_admins,
                   permission="tenants.view", template="user.signed_up", version=2)
    policy.declare(cat, "order.paid", category="financial", sensitivity="sensitive",
                   channels=("inbox", "push", "email", "sms"), recipients=_order_recipients, template="order.paid")
    policy.declare(cat, "otp.requested", category="otp", sensitivity="sensitive", channels=("inbox", "sms"),
                   recipients=_otp_recipients, variables=_otp_variables, template="otp.requested")
    # DEMO_TEMPLATES are seeded by `opsboard demo` itself (opsboard.tools.demo.seed), not shipped: a
    # shipped template is published by every process that starts with the catalogue (the tests' too).

    define_provider(cat, "demo_smtp", concurrency=4, rate_per_second=15, burst=15)
    define_provider(cat, "demo_sms", concurrency=2, rate_per_second=20, burst=20)
    define(cat, "demo.send_email", handler="opsboard.tools.demo_handlers:send_email", provider="demo_smtp",
           fields={"to_user": Field(str), "template": Field(str)}, max_attempts=4, timeout=10,
           backoff_base=2, backoff_cap=30)
    define(cat, "demo.deliver_webhook", handler="opsboard.tools.demo_handlers:deliver_webhook", concurrency=6,
           fields={"endpoint_id": Field(str), "event": Field(str)}, max_attempts=5, timeout=10,
           backoff_base=1, backoff_cap=20)
    define(cat, "demo.send_otp", handler="opsboard.tools.demo_handlers:send_otp", queue="critical", priority=0,
           provider="demo_sms", fields={"user_id": Field(str)}, max_attempts=3, timeout=5,
           backoff_base=0.5, backoff_cap=2)
    define(cat, "demo.generate_report", handler="opsboard.tools.demo_handlers:generate_report", queue="bulk",
           long_running=True, fields={"report": Field(str), "title": Field(str, required=False)},
           max_attempts=2, timeout=120)
