"""Bulk actions on jobs that act on exactly what their confirmation showed.

Two shapes, each an audited operator action (:func:`opsboard.audit.operator_action`):

* **by filter** (cancel waiting jobs, replay dead ones, purge dead ones): the preview
  (:func:`preview_waiting`, :func:`preview_dead`) counts the matching jobs and takes a
  :class:`Bound`: how many it will act on (``n``, at most the per-request limit), the
  largest id among those ``n`` in id order (``upto``) and the database's time
  (``seen_at``).  The action takes only jobs at or under ``upto`` (UUIDv7 ids grow with
  time: a job enqueued after the preview is above it) and, for dead jobs, finished at or
  before ``seen_at`` (a job created earlier that died after the preview is not taken).
  If more jobs match under the bound than the preview counted (a running job became
  retryable, a host's clock was behind), nothing is done: :class:`PreviewOutdated` (409)
  says how many match now and the page asks again.  Fewer is fine: a job that started,
  or was replayed by someone else, meanwhile is simply not acted on, and the answer says
  so.
* **by id** (tick boxes on a job list): exactly the jobs named, each re-checked under a
  row lock; the ones in a state the action does not apply to are left alone and listed.

The web checks the permission in each job's own tenant before calling these; the core
still keeps every query inside the caller's :class:`~opsboard.auth.TenantScope`.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

import psycopg

from .. import audit, db
from ..auth import TenantScope
from ..errors import OpsError
from ..schema import uuid7_floor
from .enqueue import ALL_TENANTS
from .prune import PruneSlice, walk_in_index_order
from .reads import settle_cancelled, summary_tenant
from .replay import BulkReplay, replay

#: What a selection may do, and the permission each needs in every selected job's tenant.
SELECTION_ACTIONS = {"replay": "jobs.replay", "cancel": "jobs.cancel", "discard": "jobs.resolve",
                     "run_now": "jobs.cancel"}
#: Jobs one selection may name (a page of the job list is 50).
SELECTION_MAX = 200
WAITING_STATES = ("pending", "retryable")


class PreviewOutdated(OpsError):
    """More jobs match under the preview's bound than it counted: nothing was done."""

    def __init__(self, previewed: int, now_matching: int):
        super().__init__("more jobs match now than the %(previewed)s you confirmed; nothing was done: "
                         "look at the new count and confirm again", "preview_outdated", status=409,
                         params={"previewed": previewed})
        self.previewed = previewed
        self.now_matching = now_matching


@dataclass(frozen=True)
class BulkFilter:
    """Which jobs a bulk action by filter takes.  ``status`` narrows waiting jobs to
    ``pending`` or ``retryable``; ``older_than`` is an age: waiting jobs created, dead jobs
    finished, that long before the preview."""

    type: str | None = None
    queue: str | None = None
    tenant_id: Any = None
    error_code: str | None = None
    status: str | None = None
    older_than: timedelta | None = None

    def params(self, seen_at: datetime) -> dict:
        cut = seen_at - self.older_than if self.older_than is not None else None
        return {"type": self.type, "queue": self.queue, "tenant_id": self.tenant_id,
                "error_code": self.error_code, "status": self.status, "created_before": cut,
                "finished_before": cut}

    @property
    def key(self) -> str:
        """The filter as text: the audit row's target, and what a preview's token is bound to."""
        d = {k: v for k, v in asdict(self).items() if v is not None}
        if "older_than" in d:
            d["older_than"] = f"{int(self.older_than.total_seconds())}s"
        return ";".join(f"{k}={v}" for k, v in d.items()) or "all"

    def described(self) -> dict:
        d = {k: str(v) for k, v in asdict(self).items() if v is not None}
        if self.older_than is not None:
            d["older_than_seconds"] = int(self.older_than.total_seconds())
            d.pop("older_than")
        return d


@dataclass(frozen=True)
class Bound:
    """What a preview saw: it will act on ``n`` jobs, none above ``upto`` (``None`` when
    ``n`` is 0), looking at ``seen_at`` (the database's time)."""

    n: int
    upto: uuid.UUID | None
    seen_at: datetime


@dataclass(frozen=True)
class Preview:
    #: Matching jobs counted (up to ``cap`` + 1: more than ``cap`` reads "cap+").
    count: int
    bound: Bound


@dataclass
class BulkResult:
    #: The jobs acted on (id, tenant_id, type, queue): exactly those whose state changed.
    done: list[dict] = field(default_factory=list)
    #: How many the confirmation showed (by filter), or how many were selected (by id).
    previewed: int = 0
    #: Selected jobs left alone, with why (by id): ``{"id":..., "status":...}``.
    skipped: list[dict] = field(default_factory=list)
    #: Replays made (replay only): the rows :func:`opsboard.jobqueue.replay` returned.
    replays: list[dict] = field(default_factory=list)


def _scope_filter(f: BulkFilter, scope: TenantScope, seen_at: datetime) -> dict:
    return {**f.params(seen_at), **scope.params}


# -- waiting jobs (pending, retryable): cancel by filter ---------------------------------------------

def preview_waiting(conn: psycopg.Connection, f: BulkFilter, *, scope: TenantScope = ALL_TENANTS,
                    limit: int = 1000, cap: int = 10_000, now: datetime | None = None) -> Preview:
    """How many waiting jobs match ``f`` (up to ``cap`` + 1), and the bound a cancel of them takes:
    the first ``min(count, limit)`` in id order."""
    seen_at = db.now(conn, now)
    p = _scope_filter(f, scope, seen_at)
    count = db.one(conn, "bulk_waiting_count", {**p, "upto": None, "cap": cap + 1})["n"]
    n = min(count, limit)
    upto = db.one(conn, "bulk_waiting_bound", {**p, "n": n})["upto"] if n else None
    return Preview(count, Bound(n, upto, seen_at))


def cancel_waiting(conn: psycopg.Connection, f: BulkFilter, bound: Bound, actor: audit.Actor, reason: str,
                   request_key: str | None, *, scope: TenantScope = ALL_TENANTS,
                   now: datetime | None = None) -> BulkResult:
    """Cancel the waiting jobs the preview counted: at most ``bound.n``, none above ``bound.upto``.

    Raises :class:`PreviewOutdated` (nothing done) when more than ``bound.n`` match under the bound.
    One audit row ``job.cancel_many`` (the filter, the bound, every id cancelled), in the cancel's
    transaction; idempotent on ``request_key``.
    """
    def perform(ctx: audit.ActionContext) -> BulkResult:
        if bound.n == 0 or bound.upto is None:
            rows: list[dict] = []
        else:
            p = {**_scope_filter(f, scope, bound.seen_at), "upto": bound.upto}
            matching = db.one(conn, "bulk_waiting_count", {**p, "cap": bound.n + 1})["n"]
            if matching > bound.n:
                raise PreviewOutdated(bound.n, matching)
            rows = db.all_rows(conn, "bulk_waiting_cancel", {**p, "limit": bound.n, "now": now})
        settled = settle_cancelled(conn, rows, now)
        ctx.write(tenant_id=summary_tenant(f.tenant_id, scope, {r["tenant_id"] for r in rows}),
                  before={"filter": f.described(), "previewed": bound.n, "upto": str(bound.upto)},
                  after={"cancelled": len(rows), "ids": [str(r["id"]) for r in rows], "settled": len(settled)})
        return BulkResult(rows, bound.n)

    def repeat(previous: dict) -> BulkResult:
        ids = (previous.get("after") or {}).get("ids") or []
        rows = db.all_rows(conn, "job_get_many", {"ids": ids, **scope.params}) if ids else []
        return BulkResult(rows, bound.n)

    return audit.operator_action(conn, actor, "job.cancel_many", target_type="job_filter", target_id=f.key,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


# -- dead jobs: replay and purge by filter ----------------------------------------------------------

def _dead_rows(conn, f: BulkFilter, scope: TenantScope, *, seen_at: datetime, upto, limit: int,
               purge: bool) -> list[dict]:
    return db.all_rows(conn, "bulk_dead_select", {
        **_scope_filter(f, scope, seen_at), "seen_at": seen_at, "upto": upto, "limit": limit,
        "open_only": not purge, "purge_only": purge,
        **({} if purge else {"finished_before": None})})


def preview_dead(conn: psycopg.Connection, f: BulkFilter, *, purge: bool, scope: TenantScope = ALL_TENANTS,
                 limit: int = 1000, now: datetime | None = None) -> Preview:
    """How many dead jobs a replay (open ones: not replayed, resolved or ignored, not expired) or a
    purge (``purge=True``: any dead job no surviving job replays, finished ``f.older_than`` ago) of
    ``f`` would take (counted up to ``limit`` + 1: more reads "limit+"), and its bound (the first
    ``min(count, limit)`` in id order)."""
    seen_at = db.now(conn, now)
    rows = _dead_rows(conn, f, scope, seen_at=seen_at, upto=None, limit=limit + 1, purge=purge)[:limit + 1]
    acted = rows[:limit]
    return Preview(len(rows), Bound(len(acted), acted[-1]["id"] if acted else None, seen_at))


def _bounded_dead(conn, f: BulkFilter, bound: Bound, scope: TenantScope, *, purge: bool) -> list[dict]:
    if bound.n == 0 or bound.upto is None:
        return []
    rows = _dead_rows(conn, f, scope, seen_at=bound.seen_at, upto=bound.upto, limit=bound.n + 1, purge=purge)
    if len(rows) > bound.n:
        raise PreviewOutdated(bound.n, len(rows))
    return rows


def replay_dead(conn: psycopg.Connection, f: BulkFilter, bound: Bound, actor: audit.Actor, reason: str,
                request_key: str | None, *, scope: TenantScope = ALL_TENANTS) -> BulkResult:
    """Replay the open dead jobs the preview counted (:func:`opsboard.jobqueue.replay` each, its own
    ``job.replay`` row and key ``request_key:job_id``), plus one summary row ``job.replay_many``."""
    reason = audit.checked_reason(reason)

    def perform(ctx: audit.ActionContext) -> BulkResult:
        rows = _bounded_dead(conn, f, bound, scope, purge=False)
        replays = [replay(conn, r["id"], actor, reason, f"{request_key}:{r['id']}" if request_key else None,
                          scope=scope) for r in rows]
        result = BulkResult([{"id": r["dead_job_id"], "tenant_id": r["tenant_id"]} for r in replays], bound.n,
                            replays=replays)
        ctx.write(tenant_id=summary_tenant(f.tenant_id, scope, {r["tenant_id"] for r in rows}),
                  before={"filter": f.described(), "matched": len(rows), "previewed": bound.n,
                          "upto": str(bound.upto)},
                  after={"job_ids": [str(r["id"]) for r in replays],
                         "dead_job_ids": [str(r["dead_job_id"]) for r in replays]})
        return result

    def repeat(previous: dict) -> BulkResult:
        after = previous.get("after") or {}
        ids = after.get("job_ids") or []
        rows = db.all_rows(conn, "job_get_many", {"ids": ids, **scope.params}) if ids else []
        return BulkResult([{"id": uuid.UUID(i)} for i in after.get("dead_job_ids") or []], bound.n,
                          replays=[{**r, "created": False, "repeated": True} for r in rows])

    return audit.operator_action(conn, actor, "job.replay_many", target_type="job_filter", target_id=f.key,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


def purge_dead(conn: psycopg.Connection, f: BulkFilter, bound: Bound, actor: audit.Actor, reason: str,
               request_key: str | None, *, scope: TenantScope = ALL_TENANTS) -> BulkResult:
    """Delete the dead jobs the preview counted, with their attempts (a dead job that a surviving
    replay names is kept: it is the replay's history).  One audit row ``job.purge_dead`` with the
    filter, the bound and every id deleted."""
    def perform(ctx: audit.ActionContext) -> BulkResult:
        rows = _bounded_dead(conn, f, bound, scope, purge=True)
        gone = db.all_rows(conn, "bulk_dead_delete", {"ids": [r["id"] for r in rows], **scope.params}) if rows else []
        ctx.write(tenant_id=summary_tenant(f.tenant_id, scope, {r["tenant_id"] for r in gone}),
                  before={"filter": f.described(), "previewed": bound.n, "upto": str(bound.upto)},
                  after={"deleted": len(gone), "ids": [str(r["id"]) for r in gone]})
        return BulkResult(gone, bound.n)

    def repeat(previous: dict) -> BulkResult:
        ids = (previous.get("after") or {}).get("ids") or []
        return BulkResult([{"id": uuid.UUID(i)} for i in ids], bound.n)

    return audit.operator_action(conn, actor, "job.purge_dead", target_type="job_filter", target_id=f.key,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


# -- jobs picked by id (tick boxes) -----------------------------------------------------------------

def selected_jobs(conn: psycopg.Connection, ids: list[uuid.UUID], scope: TenantScope) -> list[dict]:
    """The selected jobs the caller can see (id, tenant_id, type, queue, status, scheduled)."""
    return db.all_rows(conn, "bulk_jobs_get", {"ids": list(ids), **scope.params}) if ids else []


def applies(action: str, job: dict) -> bool:
    """Whether ``action`` applies to a job in its current state (the confirmation counts these)."""
    if action in ("replay", "discard"):
        return job["status"] == "dead"
    if action == "cancel":
        return job["status"] in WAITING_STATES
    if action == "run_now":
        return job["status"] in WAITING_STATES and bool(job.get("scheduled"))
    raise OpsError("unknown action %(action)s", "invalid_action", params={"action": action})


def act_on_selected(conn: psycopg.Connection, action: str, ids: list[uuid.UUID], actor: audit.Actor,
                    reason: str, request_key: str | None, *, scope: TenantScope = ALL_TENANTS,
                    now: datetime | None = None) -> BulkResult:
    """Replay, cancel, discard (delete a dead job) or run now exactly the jobs ``ids`` (in ``scope``).

    Each job is locked and re-checked; those the action does not apply to are left alone and
    returned in ``skipped``.  One audit row ``job.<action>_selected`` with the ids asked for and the
    ids acted on (a replay also writes each job's own ``job.replay`` row).  Idempotent on
    ``request_key``.
    """
    if action not in SELECTION_ACTIONS:
        raise OpsError("unknown action %(action)s", "invalid_action", params={"action": action})
    ids = sorted(set(ids))
    if not ids:
        raise OpsError("select at least one job", "nothing_selected")
    if len(ids) > SELECTION_MAX:
        raise OpsError("select at most %(n)s jobs", "too_many_selected", params={"n": SELECTION_MAX})
    if action == "replay":
        reason = audit.checked_reason(reason)
    target = ",".join(str(i) for i in ids)

    def perform(ctx: audit.ActionContext) -> BulkResult:
        current = db.all_rows(conn, "bulk_jobs_for_update", {"ids": ids, **scope.params})
        if len(current) != len(ids):
            raise OpsError("no such job", "not_found")
        moment = db.now(conn, now)
        with_scheduled = [{**r, "scheduled": r["available_at"] > moment} for r in current]
        eligible = [r for r in with_scheduled if applies(action, r)]
        skipped = [{"id": r["id"], "status": r["status"]} for r in with_scheduled if not applies(action, r)]
        result = BulkResult(previewed=len(ids), skipped=skipped)
        chosen = [r["id"] for r in eligible]
        if action == "cancel" and chosen:
            result.done = db.all_rows(conn, "bulk_cancel_ids", {"ids": chosen, "now": now})
            settle_cancelled(conn, result.done, now)
        elif action == "run_now" and chosen:
            result.done = db.all_rows(conn, "bulk_run_now", {"ids": chosen, "now": now})
            queues = sorted({r["queue"] for r in result.done})
            if queues:
                db.execute(conn, "job_notify_queues", {"queues": queues})
        elif action == "discard" and chosen:
            result.done = db.all_rows(conn, "bulk_dead_delete", {"ids": chosen, **scope.params})
            gone = {r["id"] for r in result.done}
            result.skipped += [{"id": i, "status": "replayed"} for i in chosen if i not in gone]
        elif action == "replay" and chosen:
            for r in eligible:
                try:
                    with conn.transaction():
                        made = replay(conn, r["id"], actor, reason,
                                      f"{request_key}:{r['id']}" if request_key else None, scope=scope)
                except OpsError as exc:  # past its expiry: left alone, said why
                    result.skipped.append({"id": r["id"], "status": exc.code})
                    continue
                result.replays.append(made)
                result.done.append({"id": r["id"], "tenant_id": r["tenant_id"], "type": r["type"]})
        ctx.write(tenant_id=summary_tenant(None, scope, {r["tenant_id"] for r in current}),
                  before={"selected": [str(i) for i in ids], "count": len(ids)},
                  after={"done": len(result.done), "ids": [str(r["id"]) for r in result.done],
                         "skipped": [{"id": str(s["id"]), "status": str(s["status"])} for s in result.skipped],
                         **({"job_ids": [str(r["id"]) for r in result.replays]} if action == "replay" else {})})
        return result

    def repeat(previous: dict) -> BulkResult:
        after = previous.get("after") or {}
        return BulkResult([{"id": uuid.UUID(i)} for i in after.get("ids") or []], len(ids),
                          skipped=[{"id": uuid.UUID(s["id"]), "status": s["status"]} for s in after.get("skipped") or []])

    return audit.operator_action(conn, actor, f"job.{action}_selected", target_type="jobs", target_id=target,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


# -- retention of dead jobs (the pruner) ------------------------------------------------------------

def prune_dead_slice(conn: psycopg.Connection, cutoff: datetime, batch: int = 5000, *,
                     after: uuid.UUID | None = None, until: float | None = None,
                     clock: Callable[[], float] = time.monotonic) -> PruneSlice:
    """Delete dead jobs finished before ``cutoff`` (``OPSBOARD_DEAD_RETENTION_DAYS``), with their
    attempts, walking the primary key upwards from ``after`` in batches of ``batch``, each in its
    own transaction, until the walk reaches the cutoff or ``clock()`` passes ``until``; as
    :func:`opsboard.jobqueue.prune_finished_slice`.  A dead job that a surviving job replays is kept."""
    total = 0
    after = after or uuid.UUID(int=0)
    while True:
        with conn.transaction():
            walk_in_index_order(conn)
            row = db.one(conn, "bulk_dead_prune", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                   "after_id": after, "limit": batch})
        total += row["n"]
        if row["seen"] < batch:
            return PruneSlice(total, None)
        after = row["last_id"]
        if until is not None and clock() >= until:
            return PruneSlice(total, after)
