"""The demo domain: a tenant's users, orders and one-time passwords.

Each function changes a domain row and publishes its event in ONE
transaction (the caller's, when it already has one open): this is the
pattern every producer follows.  Used by ``opsboard demo``, the HTTP API's
``POST /otp`` and the tests.
"""
from __future__ import annotations

import secrets
from datetime import datetime

import psycopg

from . import db, outbox
from .schema import new_id

#: An OTP is pointless after this: the SMS job expires with it.
OTP_TTL = "2 minutes"


def sign_up_user(conn: psycopg.Connection, tenant_id, email: str, *, plan: str = "free",
                 correlation_id: str | None = None) -> dict:
    """Create the user row and publish ``user.signed_up`` v2; returns ``{"user", "event"}``."""
    with conn.transaction():
        user = db.one(conn, "demo_user_insert", {"id": new_id(), "tenant_id": tenant_id,
                                                 "email": email.strip().lower(), "plan": plan})
        event = outbox.publish(conn, "user.signed_up", 2, aggregate=("user", user["id"]), tenant=tenant_id,
                               payload={"user_id": str(user["id"]), "plan": plan}, correlation_id=correlation_id)
    return {"user": user, "event": event}


def pay_order(conn: psycopg.Connection, tenant_id, amount_cents: int, currency: str = "EUR", *,
              user_id=None, order_id=None, correlation_id: str | None = None) -> dict:
    """Record a paid order and publish ``order.paid``; returns ``{"order", "event"}``."""
    with conn.transaction():
        order = db.one(conn, "demo_order_insert", {"id": order_id or new_id(), "tenant_id": tenant_id,
                                                   "user_id": user_id, "amount_cents": amount_cents,
                                                   "currency": currency})
        payload = {"order_id": str(order["id"]), "amount_cents": amount_cents, "currency": currency}
        if user_id:
            payload["user_id"] = str(user_id)
        event = outbox.publish(conn, "order.paid", 1, aggregate=("order", order["id"]), tenant=tenant_id,
                               payload=payload, correlation_id=correlation_id)
    return {"order": order, "event": event}


def request_otp(conn: psycopg.Connection, tenant_id, phone: str, *, correlation_id: str | None = None,
                now: datetime | None = None) -> dict:
    """Store an OTP for ``phone`` and publish ``otp.requested`` (SMS on ``critical``, expiring in 2 minutes).

    The phone number stays in the domain row; the event carries its id only.
    """
    with conn.transaction():
        otp = db.one(conn, "demo_otp_insert", {"id": new_id(), "tenant_id": tenant_id, "phone": phone,
                                               "code": f"{secrets.randbelow(10 ** 6):06d}", "ttl": OTP_TTL,
                                               "now": now})
        event = outbox.publish(conn, "otp.requested", 1, aggregate=("otp", otp["id"]), tenant=tenant_id,
                               payload={"otp_id": str(otp["id"])}, correlation_id=correlation_id, now=now)
    return {"otp": otp, "event": event}
