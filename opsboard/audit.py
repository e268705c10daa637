"""Append-only audit records.

Every operator action writes one row in the same transaction as the change it
records.  The table rejects UPDATE, DELETE and TRUNCATE (trigger).  An action
carrying a ``request_key`` is recorded once: a repeated request finds the first
record and returns it, which is how double submits are made harmless.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import db
from .auth import TenantScope
from .schema import new_id


@dataclass(frozen=True)
class Actor:
    """Who acts: a user (id + email), or a system label such as ``cli`` or ``worker:host-1``."""

    label: str
    id: Any = None
    request_id: str | None = None

    @classmethod
    def of(cls, principal, request_id: str | None = None) -> "Actor":
        return cls(label=principal.email, id=principal.id, request_id=request_id)


SYSTEM = Actor(label="system")


def record(conn: psycopg.Connection, actor: Actor, action: str, *, target_type: str | None = None,
           target_id: Any = None, tenant_id: Any = None, reason: str | None = None,
           before: Any = None, after: Any = None, request_key: str | None = None,
           outcome: str = "done") -> dict | None:
    """Append one audit record and return it.

    ``outcome`` is ``done``, or ``denied`` for an attempt the actor's role
    does not allow (see :func:`record_denied`).

    With ``request_key``, returns ``None`` when an identical (action, request_key)
    was recorded before: the caller should then return the earlier result
    (:func:`find_by_request_key`) instead of acting again.
    """
    return db.one(conn, "audit_insert", {
        "id": new_id(), "actor_id": actor.id, "actor_label": actor.label, "action": action,
        "target_type": target_type, "target_id": None if target_id is None else str(target_id),
        "tenant_id": tenant_id, "reason": reason,
        "before": None if before is None else Jsonb(before),
        "after": None if after is None else Jsonb(after),
        "request_id": actor.request_id, "request_key": request_key, "outcome": outcome,
    })


#: At most one denied row per user and action in this many seconds: a script
#: hammering a forbidden button must not flood the log.
DENIED_EVERY_SECONDS = 60


def record_denied(conn: psycopg.Connection, actor: Actor, action: str, *, target_type: str | None = None,
                  target_id: Any = None, tenant_id: Any = None, now: datetime | None = None) -> dict | None:
    """Record a refused attempt at ``action`` (no reason, no payload); ``None``
    when one was recorded for this user and action within
    :data:`DENIED_EVERY_SECONDS`."""
    if actor.id is not None and db.one(conn, "audit_denied_recent", {
            "actor_id": actor.id, "action": action, "seconds": DENIED_EVERY_SECONDS, "now": now})["recent"]:
        return None
    return record(conn, actor, action, target_type=target_type, target_id=target_id, tenant_id=tenant_id,
                  outcome="denied")


def find_by_request_key(conn: psycopg.Connection, action: str, request_key: str) -> dict | None:
    """The record an earlier request with this key wrote."""
    return db.one(conn, "audit_get_by_request_key", {"action": action, "request_key": request_key})


def list_records(conn: psycopg.Connection, scope: TenantScope, *, actor: str | None = None,
                 action: str | None = None, since: datetime | None = None, until: datetime | None = None,
                 target_type: str | None = None, target_id: str | None = None,
                 after: tuple[datetime, Any] | None = None, limit: int = 50) -> list[dict]:
    """Audit records visible in ``scope``, newest first; ``after`` is the keyset cursor."""
    return db.all_rows(conn, "audit_list", {
        **scope.params, "actor": actor or None, "action": action or None, "since": since, "until": until,
        "target_type": target_type or None, "target_id": target_id or None,
        "after_at": after[0] if after else None, "after_id": after[1] if after else None,
        "limit": limit,
    })


def actions(conn: psycopg.Connection, scope: TenantScope) -> list[str]:
    """Every action name recorded so far inside ``scope``."""
    return [r["action"] for r in db.all_rows(conn, "audit_action_list", scope.params)]
