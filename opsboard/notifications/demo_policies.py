"""Notification policies of the demo domain's events (``user.signed_up``, ``order.paid``, ``otp.requested``)
and their Persian/English templates (:data:`DEMO_TEMPLATES`, seeded by ``opsboard demo``).

* ``user.signed_up`` -> the tenant's admins: inbox + email, category ``account``;
* ``order.paid`` -> the platform user whose email is the order's demo user's (else the
  tenant's end users): inbox + push + email + sms, category ``financial`` (SMS-approved), sensitive;
* ``otp.requested`` -> the tenant's users whose notification phone is the OTP's: inbox + SMS,
  category ``otp`` (critical: no opt-out, no quiet hours).  The code is only in the SMS text.
"""
from __future__ import annotations

import uuid

from .. import db
from . import policy


def _admins(conn, event):
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["admin"]})]


def _order_recipients(conn, event):
    try:
        order_id = uuid.UUID(str(event["payload"].get("order_id")))
    except ValueError:
        return []  # not an order of the demo domain (the delivery demo publishes raw events)
    row = db.one(conn, "demo_order_recipient", {"order_id": order_id})
    if row is not None:
        return [row["user_id"]]
    return [r["user_id"] for r in db.all_rows(conn, "tenant_users_with_role",
                                              {"tenant_id": event["tenant_id"], "roles": ["member"]})]


def _otp_recipients(conn, event):
    try:
        uuid.UUID(str(event["payload"].get("otp_id")))
    except ValueError:
        return []
    return [r["user_id"] for r in db.all_rows(conn, "demo_otp_recipient", {"otp_id": event["payload"]["otp_id"]})]


def _otp_variables(conn, event, user_id):
    rows = db.all_rows(conn, "demo_otp_recipient", {"otp_id": event["payload"]["otp_id"]})
    return {"code": rows[0]["code"] if rows else "", "minutes": 2}


policy.declare("user.signed_up", category="account", channels=("inbox", "email"), recipients=_admins,
               permission="tenants.view", template="user.signed_up", version=2)
policy.declare("order.paid", category="financial", sensitivity="sensitive",
               channels=("inbox", "push", "email", "sms"), recipients=_order_recipients, template="order.paid")
policy.declare("otp.requested", category="otp", sensitivity="sensitive", channels=("inbox", "sms"),
               recipients=_otp_recipients, variables=_otp_variables, template="otp.requested")

#: (key, channel, locale, subject, body, variables): the demo's published templates.
DEMO_TEMPLATES = [
    ("user.signed_up", "inbox", "fa", "کاربر جدید ثبت‌نام کرد", "یک کاربر با طرح {{ plan }} ثبت‌نام کرد.", "plan"),
    ("user.signed_up", "inbox", "en", "New sign-up", "A user signed up on the {{ plan }} plan.", "plan"),
    ("user.signed_up", "email", "fa", "کاربر جدید", "<p>یک کاربر با طرح <b>{{ plan }}</b> ثبت‌نام کرد.</p>", "plan"),
    ("order.paid", "inbox", "fa", "پرداخت سفارش",
     "مبلغ {{ amount_cents|money(currency)|fa_digits }} پرداخت شد.", "amount_cents, currency"),
    ("order.paid", "inbox", "en", "Order paid", "{{ amount_cents|money(currency) }} was paid.",
     "amount_cents, currency"),
    ("order.paid", "push", "fa", "پرداخت موفق", "مبلغ {{ amount_cents|money(currency)|fa_digits }} پرداخت شد.",
     "amount_cents, currency"),
    ("order.paid", "email", "fa", "رسید پرداخت",
     "<p>مبلغ <b>{{ amount_cents|money(currency)|fa_digits }}</b> پرداخت شد.</p>", "amount_cents, currency"),
    ("order.paid", "sms", "fa", "", "پرداخت {{ amount_cents|money(currency)|fa_digits }} انجام شد.",
     "amount_cents, currency"),
    ("otp.requested", "inbox", "fa", "کد ورود ارسال شد", "یک کد یک‌بار مصرف به تلفن شما پیامک شد.", ""),
    ("otp.requested", "inbox", "en", "Sign-in code sent", "A one-time code was sent to your phone.", ""),
    ("otp.requested", "sms", "fa", "", "کد شما: {{ code|fa_digits }} (تا {{ minutes|fa_digits }} دقیقه معتبر)",
     "code, minutes"),
    ("otp.requested", "sms", "en", "", "Your code: {{ code }} (valid {{ minutes }} minutes)", "code, minutes"),
]
