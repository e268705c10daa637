"""Replay of dead jobs, one or a filtered group: audited, idempotent operator actions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .. import audit, db
from ..auth import TenantScope
from ..schema import JobStatus, new_id
from .enqueue import _insert_one, ALL_TENANTS, QueueError
from .reads import _job_uuid, get_job


def replay(conn: psycopg.Connection, job_id, actor: audit.Actor, reason: str, request_key: str | None,
           *, scope: TenantScope = ALL_TENANTS) -> dict:
    """Replay a dead job: a new job with its payload and ``replay_of``, plus an audit row.

    An operator action (:func:`opsboard.audit.operator_action`), audited as
    ``job.replay``: a reason is required; the same ``request_key`` returns the
    job the first request created (a key used for another job raises
    ``request_key_reused``).  Only dead jobs can be replayed; the dead job is
    not touched.  When the dead job's idempotency key is held by a live job
    again, that job is the replay and the audit row names it.
    """
    audit.checked_reason(reason)
    jid = _job_uuid(job_id)

    def perform(ctx: audit.ActionContext) -> dict:
        dead = get_job(conn, jid, scope)
        if dead is None:
            raise QueueError("no such job", "not_found")
        if dead["status"] != JobStatus.DEAD.value:
            raise QueueError(f"only dead jobs can be replayed; this one is {dead['status']}", "invalid_status")
        row = {
            "id": new_id(), "type": dead["type"], "version": dead["version"], "tenant_id": dead["tenant_id"],
            "queue": dead["queue"], "priority": dead["priority"], "idempotency_key": dead["idempotency_key"],
            "group_key": dead["group_key"], "payload": Jsonb(dead["payload"]), "max_attempts": dead["max_attempts"],
            "run_at": None, "expires_at": None, "correlation_id": dead["correlation_id"],
            "event_id": dead["event_id"], "replay_of": dead["id"],
        }
        # The job first, then the audit row naming it: a concurrent identical
        # request waits on the audit row's unique request key, then finds it
        # and its own job is undone.
        inserted = _insert_one(conn, row)
        if inserted is None:
            # The idempotency key is held by a live job (an earlier replay,
            # or the producer enqueued it again): that job is the replay.
            inserted = db.one(conn, "job_get_live_by_key", row)
        ctx.write(tenant_id=dead["tenant_id"],
                  before={"status": "dead", "last_error_code": dead["last_error_code"]},
                  after={"job_id": str(inserted["id"])})
        return inserted

    return audit.operator_action(
        conn, actor, "job.replay", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_job(conn, previous["after"]["job_id"], scope) or {})


@dataclass
class DeadFilter:
    type: str | None = None
    queue: str | None = None
    tenant_id: Any = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: Only dead jobs not yet replayed, resolved or ignored (the dashboard's "open" dead letters).
    open_only: bool = False


@dataclass
class BulkReplay:
    replayed: list[dict] = field(default_factory=list)
    #: All dead jobs matching the filter; at most ``limit`` of them were replayed.
    matched: int = 0


def replay_many(conn: psycopg.Connection, filter: DeadFilter, actor: audit.Actor, reason: str,
                request_key: str | None, *, scope: TenantScope = ALL_TENANTS, limit: int = 1000) -> BulkReplay:
    """Replay every dead job matching ``filter`` (at most ``limit``), one audit row each.

    Idempotent on ``request_key``: each job's replay uses ``request_key:job_id``.
    """
    rows = db.all_rows(conn, "job_dead_select", {
        **scope.params, "type": filter.type, "queue": filter.queue, "tenant_id": filter.tenant_id,
        "error_code": filter.error_code, "since": filter.since, "until": filter.until,
        "open_only": filter.open_only, "limit": limit})
    result = BulkReplay(matched=rows[0]["matched"] if rows else 0)
    for r in rows:
        key = f"{request_key}:{r['id']}" if request_key else None
        result.replayed.append(replay(conn, r["id"], actor, reason, key, scope=scope))
    return result
