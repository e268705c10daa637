"""A job and its attempts as the dashboard and the API read them; cancelling one.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from .. import audit, db, jobtypes
from ..auth import TenantScope
from ..errors import OpsError
from .enqueue import ALL_TENANTS


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
        raise OpsError("no such job", "not_found") from None


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
            raise OpsError("no such job", "not_found")
        row = db.one(conn, "job_cancel", {"id": jid, "now": now, **scope.params})
        if row is None:
            raise OpsError("only pending or retryable jobs can be cancelled; this one is %(status)s",
                           "invalid_status", params={"status": current["status"]})
        settled = settle_cancelled(conn, [row], now)
        if ctx is not None:
            after = {"status": "cancelled"}
            if settled:
                after["settled"] = settled
            ctx.write(tenant_id=row["tenant_id"], before={"status": current["status"]}, after=after)
        return row

    if actor is None:
        with conn.transaction():
            return perform(None)
    return audit.operator_action(
        conn, actor, "job.cancel", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_job(conn, jid, scope) or {})


def settle_cancelled(conn: psycopg.Connection, rows: list[dict], now: datetime | None = None) -> list[str]:
    """Run each cancelled job type's ``on_cancel`` query (:attr:`opsboard.jobtypes.JobType.on_cancel`)
    over that type's jobs of ``rows`` (``id``, ``type``, ``version``), in the cancel's transaction: what
    waited on them (a message, a notification delivery) is settled, never left queued.  The ids it
    settled."""
    by_query: dict[str, list] = {}
    for r in rows:
        try:
            query = jobtypes.get(r["type"], r["version"]).on_cancel
        except jobtypes.UnknownJobType:
            continue  # a type no longer in the catalogue: nothing of it to settle
        if query is not None:
            by_query.setdefault(query, []).append(r["id"])
    settled: list[str] = []
    for query, ids in sorted(by_query.items()):
        settled += [str(r["id"]) for r in db.all_rows(conn, query, {"job_ids": ids, "now": now})]
    return settled


@dataclass(frozen=True)
class CancelFilter:
    """Which unstarted jobs a bulk cancel takes: the dead-letter group's shape
    (:class:`~opsboard.jobqueue.replay.DeadFilter`), over pending and retryable jobs."""

    type: str | None = None
    queue: str | None = None
    tenant_id: Any = None
    error_code: str | None = None

    @property
    def params(self) -> dict:
        return {"type": self.type, "queue": self.queue, "tenant_id": self.tenant_id, "error_code": self.error_code}

    @property
    def key(self) -> str:
        """The filter as the audit row's target (what a request key is bound to)."""
        return ";".join(f"{k}={v}" for k, v in self.params.items() if v is not None) or "all"


@dataclass
class BulkCancel:
    #: The jobs cancelled (id, tenant_id, type, version, queue): exactly those whose status changed.
    cancelled: list[dict] = field(default_factory=list)
    #: Jobs that matched and were left for a next request (over ``limit``), counted after the cancel.
    remaining: int = 0


def count_cancellable(conn: psycopg.Connection, f: CancelFilter, *, scope: TenantScope = ALL_TENANTS,
                      cap: int | None = None) -> int:
    """How many pending or retryable jobs match ``f`` in ``scope`` (the bulk cancel's preview);
    with a ``cap``, counted up to it only (a backlog of millions takes seconds to count)."""
    return db.one(conn, "job_cancel_count", {**f.params, **scope.params, "cap": cap})["n"]


def summary_tenant(requested, scope: TenantScope, tenants: set):
    """The tenant a bulk action's summary audit row belongs to, so that the tenant's own staff see it:
    the filter's tenant, else the one tenant of the jobs acted on, else the caller's only tenant;
    ``None`` (operator staff only) when it spans tenants.  Never a tenant outside ``scope``: a filter
    naming another tenant matches nothing and writes nothing into that tenant's log (issue 42)."""
    if requested is not None and scope.allows(requested):
        return requested
    tenants = {t for t in tenants if t is not None}
    if len(tenants) == 1:
        return next(iter(tenants))
    if not tenants and not scope.all and len(scope.ids) == 1:
        return scope.ids[0]
    return None


def cancel_many(conn: psycopg.Connection, f: CancelFilter, actor: audit.Actor, reason: str | None,
                request_key: str | None, *, scope: TenantScope = ALL_TENANTS, limit: int = 1000,
                now: datetime | None = None) -> BulkCancel:
    """Cancel every pending or retryable job matching ``f`` (at most ``limit``), as one operator action.

    One audit row ``job.cancel_many`` (target: the filter) lists every cancelled
    job's id, written in the same transaction as the cancel: the count shown,
    the audit row and the jobs' states agree.  Idempotent on ``request_key``: a
    repeated request answers with the first one's jobs and cancels nothing more.
    """
    def perform(ctx: audit.ActionContext) -> BulkCancel:
        rows = db.all_rows(conn, "job_cancel_matching", {**f.params, **scope.params, "limit": limit, "now": now})
        settled = settle_cancelled(conn, rows, now)
        ctx.write(tenant_id=summary_tenant(f.tenant_id, scope, {r["tenant_id"] for r in rows}),
                  before={"filter": {k: str(v) for k, v in f.params.items() if v is not None}},
                  after={"cancelled": len(rows), "ids": [str(r["id"]) for r in rows], "settled": len(settled)})
        return BulkCancel(rows, count_cancellable(conn, f, scope=scope))

    def repeat(previous: dict) -> BulkCancel:
        ids = (previous.get("after") or {}).get("ids") or []
        rows = db.all_rows(conn, "job_get_many", {"ids": ids, **scope.params}) if ids else []
        return BulkCancel(rows, count_cancellable(conn, f, scope=scope))

    return audit.operator_action(conn, actor, "job.cancel_many", target_type="job_filter", target_id=f.key,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)
