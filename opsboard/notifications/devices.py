"""A user's devices: Web Push subscriptions (lifecycle in :mod:`opsboard.deliveries.messages`).

``push_subscriptions.user_ref`` holds the platform user id.  Register revives
an existing endpoint; unregister revokes it (never used again); the push
service's 404/410 marks it invalid (the provider handler does that).
"""
from __future__ import annotations

import psycopg

from .. import db
from ..deliveries import messages
from ..errors import OpsError


def register(conn: psycopg.Connection, tenant_id, user_id, subscription: dict, *, allow=()) -> dict:
    """Store a browser's PushSubscription for the user; returns the row.

    A device belongs to its user: an endpoint another user of the tenant registered (and has not
    revoked) is refused (``device_taken``, 409) rather than moved to the caller, who could then
    read its pushes' keys or delete it.  ``allow``: networks a push endpoint may be in although
    private (the caller's ``Config.providers.webhook_allow``).
    """
    try:
        row = messages.add_push_subscription(conn, tenant_id, subscription, user_ref=str(user_id), allow=allow)
    except messages.InvalidPayload as exc:
        raise OpsError(str(exc), "invalid_subscription") from None
    if row is None:
        raise OpsError("this push endpoint is registered to another user", "device_taken", status=409)
    return row


def home_tenant(conn: psycopg.Connection, user_id):
    """The user's first active tenant, where their devices live (``no_membership`` when there is none)."""
    tenants = db.all_rows(conn, "user_tenants", {"user_id": user_id})
    if not tenants:
        raise OpsError("you are not an active member of any tenant", "no_membership", status=403)
    return tenants[0]["tenant_id"]


def register_for_user(conn: psycopg.Connection, user_id, subscription: dict, *, allow=()) -> dict:
    """Register in the user's first active tenant (``no_membership`` when there is none)."""
    return register(conn, home_tenant(conn, user_id), user_id, subscription, allow=allow)


def is_active(conn: psycopg.Connection, user_id, subscription_id) -> bool:
    """Whether the user's device is still registered (not unregistered, not refused by the push service)."""
    try:
        return any(str(s["id"]) == str(subscription_id) for s in active(conn, home_tenant(conn, user_id), user_id))
    except OpsError:
        return False


def unregister(conn: psycopg.Connection, user_id, subscription_id) -> dict:
    row = db.one(conn, "user_push_subscription_revoke", {"id": subscription_id, "user_ref": str(user_id)})
    if row is None:
        raise OpsError("no such active device", "not_found")
    return row


def active(conn: psycopg.Connection, tenant_id, user_id) -> list[dict]:
    return db.all_rows(conn, "user_push_subscriptions", {"tenant_id": tenant_id, "user_ref": str(user_id)})
