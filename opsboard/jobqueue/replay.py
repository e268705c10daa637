"""Replay of dead jobs, one or a filtered group: audited, idempotent operator actions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .. import audit, db, jobtypes
from ..auth import TenantScope
from ..schema import JobStatus, new_id
from ..errors import OpsError
from .enqueue import _insert_one, ALL_TENANTS
from .reads import _job_uuid, get_job
from . import workflows


def replay(conn: psycopg.Connection, job_id, actor: audit.Actor, reason: str, request_key: str | None,
           *, scope: TenantScope = ALL_TENANTS) -> dict:
    """Replay a dead job: a new job with its payload and ``replay_of``, plus an audit row.

    An operator action (:func:`opsboard.audit.operator_action`), audited as
    ``job.replay``: a reason is required; the same ``request_key`` returns the
    job the first request created (a key used for another job raises
    ``request_key_reused``).  Only dead jobs can be replayed; the dead job is
    not touched.  When the dead job's idempotency key is held by a live job
    again (another dead job's replay, or the producer's new job), that job is
    the replay: the audit row names it, a ``job_replay_links`` row records it
    (so the dead job reads as replayed, not open), and the returned row says
    ``created = False``.  Every returned row has ``created`` (a new job was
    made) and ``repeated`` (this request key was used before: the first
    request's result, whatever the reason given now).
    """
    audit.checked_reason(reason)
    jid = _job_uuid(job_id)

    def perform(ctx: audit.ActionContext) -> dict:
        dead = get_job(conn, jid, scope)
        if dead is None:
            raise OpsError("no such job", "not_found")
        if dead["status"] != JobStatus.DEAD.value:
            raise OpsError("only dead jobs can be replayed; this one is %(status)s", "invalid_status",
                           params={"status": dead["status"]})
        if dead["expires_at"] is not None and dead["expires_at"] <= db.now(conn):
            # Past its time to live the job is pointless (a one-time code the user can no longer enter);
            # a replay would only be made dead again as expired -- or, without the expiry, send it.
            raise OpsError("this job is past its expiry time; a replay would be pointless", "job_expired")
        row = {
            "id": new_id(), "type": dead["type"], "version": dead["version"], "tenant_id": dead["tenant_id"],
            "queue": dead["queue"], "priority": dead["priority"], "idempotency_key": dead["idempotency_key"],
            "group_key": dead["group_key"], "payload": Jsonb(dead["payload"]), "max_attempts": dead["max_attempts"],
            # The same time to live: a replay never outlives what the job was for.
            "run_at": None, "expires_at": dead["expires_at"], "correlation_id": dead["correlation_id"],
            "event_id": dead["event_id"], "replay_of": dead["id"],
            # A replay continues the dead job's trace (opsboard.tracing): its attempts show beside the first ones.
            "trace_context": dead.get("trace_context"),
            # The same concurrency key (issue 50): a replay is limited as the job was.
            "concurrency_key": dead.get("concurrency_key"),
        }
        # The job first, then the audit row naming it: a concurrent identical
        # request waits on the audit row's unique request key, then finds it
        # and its own job is undone.
        inserted = _insert_one(conn, row)
        created = inserted is not None
        if not created:
            # The idempotency key is held by a live job (an earlier replay,
            # or the producer enqueued it again): that job is the replay.
            inserted = db.one(conn, "job_get_live_by_key", row)
            db.execute(conn, "job_replay_link_insert", {"dead_job_id": dead["id"], "job_id": inserted["id"]})
        after = {"job_id": str(inserted["id"])}
        if workflows.is_task_key(dead["idempotency_key"]):
            # A workflow's dead task: the task runs the replay, and what its death cancelled waits again.
            resumed = workflows.resume_task(conn, dead, inserted["id"])
            if resumed:
                after["workflow_tasks_resumed"] = resumed
        reopened = _reopen(conn, dead)
        if reopened:
            after["reopened"] = reopened
        ctx.write(tenant_id=dead["tenant_id"],
                  before={"status": "dead", "last_error_code": dead["last_error_code"]}, after=after)
        return {**inserted, "created": created, "repeated": False, "dead_job_id": dead["id"]}

    def repeat(previous: dict) -> dict:
        after = previous["after"] or {}
        job = get_job(conn, after["job_id"], scope) or {"id": after["job_id"], "replay_of": jid}
        return {**job, "created": job.get("replay_of") == jid, "repeated": True, "dead_job_id": jid,
                "first_reason": previous["reason"], "first_at": previous["at"]}

    return audit.operator_action(
        conn, actor, "job.replay", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=repeat)


def _reopen(conn: psycopg.Connection, dead: dict) -> list[str]:
    """Run the dead job's type's ``on_replay`` query (:attr:`opsboard.jobtypes.JobType.on_replay`): what
    the dead job's failure settled for good goes back to waiting for the replay.  The ids it reopened."""
    try:
        query = jobtypes.get(dead["type"], dead["version"]).on_replay
    except jobtypes.UnknownJobType:
        return []  # a type no longer in the catalogue: its handler is gone too, nothing to reopen
    if query is None:
        return []
    rows = db.all_rows(conn, query, {"tenant_id": dead["tenant_id"], "payload": Jsonb(dead["payload"]), "now": None})
    return [str(r["id"]) for r in rows]


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
    #: One row per dead job replayed (see :func:`replay`): several dead jobs that
    #: shared an idempotency key have the same replay job.
    replayed: list[dict] = field(default_factory=list)
    #: All dead jobs matching the filter; at most ``limit`` of them were replayed.
    matched: int = 0

    @property
    def jobs(self) -> list[dict]:
        """The distinct replay jobs, in order: what the dead jobs were replayed as."""
        seen: dict = {}
        for r in self.replayed:
            seen.setdefault(str(r["id"]), r)
        return list(seen.values())

    @property
    def created(self) -> int:
        """How many new jobs the replay made."""
        return sum(1 for r in self.jobs if r.get("created", True))


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
