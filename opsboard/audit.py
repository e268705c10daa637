"""Append-only audit records.

Every operator action writes one row in the same transaction as the change it
records.  The table rejects UPDATE, DELETE and TRUNCATE (trigger).  An action
carrying a ``request_key`` is recorded once: a repeated request finds the first
record and returns it, which is how double submits are made harmless.

:func:`operator_action` is the one way an operator action is written: every
audited, idempotent action (cancel, replay, resolve, acknowledge, and the next
ones: ticket transitions, template publishing, notification resends, API keys)
goes through it rather than repeating its steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from . import db
from .auth import TenantScope
from .errors import OpsError
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

T = TypeVar("T")


class _LostRace(Exception):
    """Raised inside an action's savepoint when an identical request recorded its key first."""


@dataclass(frozen=True)
class ActionContext:
    """What :func:`operator_action` hands to the action's ``perform`` function.

    ``perform`` makes its change and calls :meth:`write` exactly once, before or
    after the change (before when the change itself would refuse a concurrent
    twin, e.g. a unique row; after when the audit row names what the change made).
    """

    conn: psycopg.Connection
    actor: Actor
    action: str
    target_type: str
    target_id: str
    reason: str
    request_key: str | None

    def write(self, *, tenant_id: Any = None, before: Any = None, after: Any = None) -> dict:
        """Append the action's audit row, in the action's transaction, and return it.

        When an identical request (same action and request key) recorded its row
        first, this undoes the action (its savepoint is rolled back) and
        :func:`operator_action` returns that request's result instead.
        """
        row = record(self.conn, self.actor, self.action, target_type=self.target_type, target_id=self.target_id,
                     tenant_id=tenant_id, reason=self.reason, before=before, after=after,
                     request_key=self.request_key)
        if row is None:
            raise _LostRace()
        return row


def checked_reason(reason: str | None) -> str:
    """The trimmed reason of an operator action; ``OpsError("reason_required")`` when empty."""
    text = (reason or "").strip()
    if not text:
        raise OpsError("a reason is required", "reason_required")
    return text


def operator_action(conn: psycopg.Connection, actor: Actor, action: str, *, target_type: str, target_id: Any,
                    reason: str | None, request_key: str | None,
                    perform: Callable[[ActionContext], T], repeat: Callable[[dict], T]) -> T:
    """Run one audited, idempotent operator action and return its result.

    The steps every operator action needs, in one place:

    1. the reason is required (``reason_required``);
    2. with a ``request_key``, an earlier request with the same key (and the
       same ``action``) is looked up first, and its result returned
       (``repeat(record)``) without acting again; a key that was used for
       another target is refused (``request_key_reused``);
    3. otherwise ``perform(ctx)`` makes the change and calls ``ctx.write(...)``
       for the audit row, all in one transaction (a savepoint when the caller
       has one open already): the change and its record commit together or not
       at all;
    4. a lost race is re-checked: an identical request running at the same
       moment either makes ``ctx.write`` wait on the audit row's unique key, or
       makes ``perform`` refuse with an :class:`OpsError` (the job was cancelled
       meanwhile, the alert acknowledged...).  Either way the first request's
       record is looked up again, this action is rolled back, and the first
       request's result returned: a double submit answers twice the same way.

    ``target_id`` is what the key is bound to (compared as text); resolve it
    (parse the id, refuse ``not_found``) before calling.  Errors are
    :class:`~opsboard.errors.OpsError` with a stable code.

    Example, the shape a new action takes (publishing a template version)::

        def publish(conn, template_id, actor, reason, request_key, *, scope):
            def perform(ctx: audit.ActionContext) -> dict:
                tpl = db.one(conn, "template_get_for_update", {"id": template_id, **scope.params})
                if tpl is None:
                    raise OpsError("no such template", "not_found")
                row = db.one(conn, "template_publish", {"id": template_id})
                if row is None:
                    raise OpsError("this version is published already", "already_published")
                ctx.write(tenant_id=tpl["tenant_id"], before={"published": tpl["published_version"]},
                          after={"published": row["published_version"]})
                return row

            def repeat(previous: dict) -> dict:   # the audit row of the first request
                return db.one(conn, "template_get", {"id": previous["target_id"], **scope.params}) or {}

            return audit.operator_action(conn, actor, "template.publish", target_type="template",
                                         target_id=template_id, reason=reason, request_key=request_key,
                                         perform=perform, repeat=repeat)
    """
    reason = checked_reason(reason)
    target = str(target_id)

    def earlier() -> dict | None:
        if not request_key:
            return None
        previous = find_by_request_key(conn, action, request_key)
        if previous is not None and previous["target_id"] != target:
            raise OpsError("this request key was used for %(action)s on another %(target)s", "request_key_reused",
                           params={"action": action, "target": target_type})
        return previous

    ctx = ActionContext(conn, actor, action, target_type, target, reason, request_key)
    with conn.transaction():
        previous = earlier()
        if previous is not None:
            return repeat(previous)
        try:
            with conn.transaction():  # a savepoint: a lost race undoes only this action
                return perform(ctx)
        except _LostRace:
            previous = earlier()
            if previous is None:  # cannot happen: the insert conflicted on this very key
                raise OpsError("the request key is contended; retry", "idempotency_conflict") from None
            return repeat(previous)
        except OpsError:
            # Refused (wrong status, already done): if an identical request
            # committed meanwhile, that is why; answer with its result.
            previous = earlier()
            if previous is None:
                raise
            return repeat(previous)


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


def staff_label(role: str) -> str:
    """How operator staff appear to a tenant: by role, never by address."""
    return f"operator staff ({role.replace('_', ' ')})"


def hide_staff(conn: psycopg.Connection, scope: TenantScope, rows: list[dict], *, id_key: str,
               label_key: str) -> list[dict]:
    """For a tenant-scoped viewer, replace ``row[label_key]`` (an actor's email)
    by :func:`staff_label` wherever ``row[id_key]`` is operator staff, and set
    ``row[label_key + "_staff_role"]`` to their role (pages translate the label
    from it); platform viewers see everything as it is.  Returns ``rows``
    (changed in place)."""
    if scope.all:
        return rows
    ids = list({r[id_key] for r in rows if r and r.get(id_key) is not None})
    if not ids:
        return rows
    roles = {r["user_id"]: r["role"] for r in db.all_rows(conn, "audit_staff_roles", {"ids": ids})}
    for row in rows:
        if row and row.get(id_key) in roles:
            row[label_key] = staff_label(roles[row[id_key]])
            row[label_key + "_staff_role"] = roles[row[id_key]]
    return rows


def actions(conn: psycopg.Connection, scope: TenantScope) -> list[str]:
    """Every action name recorded so far inside ``scope``."""
    return [r["action"] for r in db.all_rows(conn, "audit_action_list", scope.params)]
