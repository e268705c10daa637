"""The end user's inbox: the source of truth that every channel points back to.

The cursor is the row's ``seq``: newest first with ``before`` (keyset
pagination: rows inserted meanwhile never shift a page), or oldest first with
``since`` (sync after a lost push or SSE; inbox inserts are serialised until
commit, so nothing commits behind a cursor already handed out).  Seen, read
and archived are the user's own state, independent of delivery status.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

import psycopg

from .. import db, tenancy
from ..errors import OpsError
from ..schema import new_id

STATES = ("seen", "read", "archived")
MAX_LIMIT = 100
#: The largest inbox cursor (``seq`` is a bigint): a larger one is a malformed request, not a query.
MAX_CURSOR = 2**63 - 1


def parse_cursor(raw: str | None) -> int | None:
    """A client's resume point (``Last-Event-ID`` or ``?since=``): None when absent, -1 when it is not
    an inbox cursor (a non-negative integer), else the cursor.  Shared by both stream servers."""
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        return -1
    return value if 0 <= value <= MAX_CURSOR else -1
#: pg_notify channel for new inbox rows; the payload is the recipient's id, or '*' for "everyone, re-check".
CHANNEL = "opsboard_inbox"


def page(conn: psycopg.Connection, user_id, *, before: int | None = None, since: int | None = None,
         limit: int = 50, include_archived: bool = False) -> dict:
    """``{"items", "next_cursor"}``: newest first before ``before``, or oldest first after ``since``."""
    limit = max(1, min(int(limit), MAX_LIMIT))
    if since is not None:
        items = db.all_rows(conn, "inbox_since", {"user_id": user_id, "since": since, "limit": limit})
        return {"items": items, "next_cursor": items[-1]["seq"] if items else since}
    items = db.all_rows(conn, "inbox_page", {"user_id": user_id, "before": before, "limit": limit,
                                             "include_archived": include_archived})
    return {"items": items, "next_cursor": items[-1]["seq"] if len(items) == limit else None}


def since(conn: psycopg.Connection, user_id, cursor: int, limit: int = MAX_LIMIT) -> list[dict]:
    return db.all_rows(conn, "inbox_since", {"user_id": user_id, "since": cursor, "limit": limit})


def latest_cursor(conn: psycopg.Connection, user_id) -> int:
    return db.one(conn, "inbox_latest_seq", {"user_id": user_id})["seq"]


def unread_count(conn: psycopg.Connection, user_id) -> int:
    return db.one(conn, "inbox_unread_count", {"user_id": user_id})["unread"]


def get(conn: psycopg.Connection, user_id, notification_id) -> dict:
    row = db.one(conn, "inbox_get", {"user_id": user_id, "id": notification_id})
    if row is None:
        raise OpsError("no such notification", "not_found")
    return row


def mark(conn: psycopg.Connection, user_id, notification_id, state: str, now: datetime | None = None) -> dict:
    """Mark seen / read (implies seen) / archived; repeating keeps the first time."""
    if state not in STATES:
        raise OpsError("state must be one of %(names)s", "invalid_state", params={"names": ", ".join(STATES)})
    row = db.one(conn, "inbox_mark", {"user_id": user_id, "id": notification_id, "state": state, "now": now})
    if row is None:
        raise OpsError("no such notification", "not_found")
    return row


# ---------------------------------------------------------------- user bearer tokens

def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def create_token(conn: psycopg.Connection, user_id, name: str = "app") -> tuple[str, dict]:
    """A new bearer token for the end-user inbox API: ``(secret, row)``; only the hash is stored."""
    secret = "obu_" + secrets.token_urlsafe(32)
    row = db.one(conn, "user_token_insert", {"id": new_id(), "user_id": user_id, "name": name,
                                             "prefix": secret[:10], "token_hash": _hash(secret)})
    return secret, row


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def verify_token(conn: psycopg.Connection, secret: str) -> dict | None:
    """``{id, user_id, email, active_member}`` of a live token of an active user, else None.

    ``active_member`` is False when none of the user's memberships is active: the APIs answer 403.
    """
    if not secret.startswith("obu_") or len(secret) > 200:
        return None
    return db.one(conn, "user_token_verify", {"token_hash": _hash(secret)})
