"""The demo application's domain: a tenant's users, orders and sign-in codes.

Each function changes a domain row and publishes its event in ONE
transaction (the caller's, when it already has one open): this is the
pattern every producer follows.  Used by ``opsboard demo`` and the tests.

A plug-in of the tools layer, like its catalogue
(:mod:`opsboard.tools.demo_catalogue`): its tables are created by
:func:`apply_schema` (``demo_schema.sql``, never a product migration) and its
named queries are :data:`DEMO_QUERIES` (``demo_sql/*.sql``), apart from the
product's :data:`opsboard.db.queries`.  The product's own OTPs are
:mod:`opsboard.otp`.
"""
from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

import psycopg

from .. import db, outbox
from ..schema import new_id

_HERE = Path(__file__).resolve().parent
#: The demo's tables (CREATE ... IF NOT EXISTS: applying it again changes nothing).
SCHEMA_FILE = _HERE / "demo_schema.sql"
#: The demo's named queries, parsed like the product's.
DEMO_QUERIES: dict[str, str] = db.load_queries(_HERE / "demo_sql")


def apply_schema(conn: psycopg.Connection) -> None:
    """Create the demo's tables on a migrated database (idempotent)."""
    with conn.transaction():
        conn.execute(SCHEMA_FILE.read_text(encoding="utf-8"))


def one(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> dict | None:
    """Run the demo's named query and return its first row (or ``None``)."""
    return conn.execute(DEMO_QUERIES[name], params or {}).fetchone()


def all_rows(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> list[dict]:
    """Run the demo's named query and return every row."""
    return conn.execute(DEMO_QUERIES[name], params or {}).fetchall()

#: An OTP is pointless after this: the SMS job expires with it.
OTP_TTL = "2 minutes"


def sign_up_user(conn: psycopg.Connection, tenant_id, email: str, *, plan: str = "free",
                 correlation_id: str | None = None) -> dict:
    """Create the user row and publish ``user.signed_up`` v2; returns ``{"user", "event"}``."""
    with conn.transaction():
        user = one(conn, "demo_user_insert", {"id": new_id(), "tenant_id": tenant_id,
                                              "email": email.strip().lower(), "plan": plan})
        event = outbox.publish(conn, "user.signed_up", 2, aggregate=("user", user["id"]), tenant=tenant_id,
                               payload={"user_id": str(user["id"]), "plan": plan}, correlation_id=correlation_id)
    return {"user": user, "event": event}


def pay_order(conn: psycopg.Connection, tenant_id, amount_cents: int, currency: str = "EUR", *,
              user_id=None, order_id=None, correlation_id: str | None = None) -> dict:
    """Record a paid order and publish ``order.paid``; returns ``{"order", "event"}``."""
    with conn.transaction():
        order = one(conn, "demo_order_insert", {"id": order_id or new_id(), "tenant_id": tenant_id,
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
    """Store a demo sign-in code for ``phone`` and publish ``otp.requested`` (its consumers run on
    ``critical`` and expire in 2 minutes).

    The demo's event-driven OTP, reaching the tenant's members whose profile phone is ``phone``
    through the demo's notification policy; the product's ``POST /api/v1/otp`` is
    :func:`opsboard.otp.request_otp`.  The phone number stays in the domain row; the event
    carries its id only.
    """
    with conn.transaction():
        otp = one(conn, "demo_otp_insert", {"id": new_id(), "tenant_id": tenant_id, "phone": phone,
                                            "code": f"{secrets.randbelow(10 ** 6):06d}", "ttl": OTP_TTL,
                                            "now": now})
        event = outbox.publish(conn, "otp.requested", 1, aggregate=("otp", otp["id"]), tenant=tenant_id,
                               payload={"otp_id": str(otp["id"])}, correlation_id=correlation_id, now=now)
    return {"otp": otp, "event": event}
