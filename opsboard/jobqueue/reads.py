"""A job and its attempts as the dashboard and the API read them; cancelling one.
"""
from __future__ import annotations

import uuid
from datetime import datetime

import psycopg

from .. import audit, db
from ..auth import TenantScope
from .enqueue import ALL_TENANTS, QueueError


def get_by_keys(conn: psycopg.Connection, tenant_id, job_type: str, keys: list[str]) -> dict[str, dict]:
    """The job holding each idempotency key (live first, else the newest dead one), by key."""
    if not keys:
        return {}
    rows = db.all_rows(conn, "job_get_by_keys", {"tenant_id": tenant_id, "type": job_type, "keys": list(keys)})
    return {r["idempotency_key"]: r for r in rows}


def get_job(conn: psycopg.Connection, job_id, scope: TenantScope = ALL_TENANTS) -> dict | None:
    """One job inside ``scope``, or ``None``."""
    try:
        jid = uuid.UUID(str(job_id))
    except ValueError:
        return None
    return db.one(conn, "job_get", {"id": jid, **scope.params})


def attempts(conn: psycopg.Connection, job_id) -> list[dict]:
    """Every attempt of a job, oldest first."""
    return db.all_rows(conn, "job_attempts_list", {"job_id": job_id})


def _job_uuid(job_id) -> uuid.UUID:
    try:
        return uuid.UUID(str(job_id))
    except ValueError:
        raise QueueError("no such job", "not_found") from None


def cancel(conn: psycopg.Connection, job_id, *, actor: audit.Actor | None = None, reason: str | None = None,
           scope: TenantScope = ALL_TENANTS, request_key: str | None = None, now: datetime | None = None) -> dict:
    """Cancel a pending or retryable job and return it.

    With an ``actor`` it is an operator action (:func:`opsboard.audit.operator_action`):
    a reason is required, it is audited as ``job.cancel`` and idempotent on
    ``request_key``.  Without one (a producer's own cancel) nothing is audited.
    """
    jid = _job_uuid(job_id)

    def perform(ctx: audit.ActionContext | None) -> dict:
        # Locked first: the audit row records the status actually cancelled
        # (pending or retryable), no claim can take the job meanwhile, and an
        # identical request arriving at the same moment waits here, then
        # finds the first one's audit row and returns its result.
        current = db.one(conn, "job_get_for_update", {"id": jid, **scope.params})
        if current is None:
            raise QueueError("no such job", "not_found")
        row = db.one(conn, "job_cancel", {"id": jid, "now": now, **scope.params})
        if row is None:
            raise QueueError(f"only pending or retryable jobs can be cancelled; this one is {current['status']}",
                             "invalid_status")
        if ctx is not None:
            ctx.write(tenant_id=row["tenant_id"], before={"status": current["status"]},
                      after={"status": "cancelled"})
        return row

    if actor is None:
        with conn.transaction():
            return perform(None)
    return audit.operator_action(
        conn, actor, "job.cancel", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_job(conn, jid, scope) or {})
