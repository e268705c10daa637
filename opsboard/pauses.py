"""Incident controls: hold (pause) and release (resume) a queue, a job type, a tenant or a provider.

A hold is one row of ``pauses`` (migration 0027), keyed by (kind, target):

* ``queue``: a queue name (``critical``, ``default``, ``bulk``): nothing of it is claimed;
* ``type``: a job type of the catalogue;
* ``tenant``: a tenant's slug (the row also keeps its id, which the claim compares);
* ``provider``: a provider; every job type whose policy names it is held (a
  manual breaker).

The claim statement filters held work (``job_claim_many``, given :class:`Holds`):
held jobs stay pending in their place, spend no attempt and are never claimed
and released; jobs already running finish.  A change notifies ``opsboard_pauses``
(:data:`~opsboard.schema.PAUSES_CHANNEL`), which makes every worker re-read the
holds and wakes its fetchers; workers also re-read at least every second.  A hold with ``resume_at`` counts as
released from that moment on (the claim compares it with its own clock); the
row is deleted and audited as an automatic resume by the pauses service (leader)
or the next :func:`list_pauses`.

Live concurrency, the same way (re-read with the holds, so within a second):
:func:`set_limit` sets a job type's or a provider's fleet-wide limit, or a
queue's slots per worker (every worker serving it grows or shrinks its slot
threads; see ``worker.runner.Worker.apply_slots``); :func:`set_tenant_limits`
sets a tenant's enqueue rate and burst (read by every admission) and its
concurrency (``tenants.max_running``, checked in the claim).

Pause and resume are operator actions through :func:`opsboard.audit.operator_action`
(a reason, a request key, an audit row in the same transaction).  Holding the
``critical`` queue or the ``sms.otp`` type needs ``confirmed=True`` (the
dashboard asks twice, the CLI wants ``--confirm``).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import audit, db, jobtypes
from .catalogue import active
from .config import QUEUE_NAMES, QUEUE_SLOTS_MAX
from .errors import OpsError

KINDS = ("queue", "type", "tenant", "provider")

#: Holding one of these stops what users wait for (OTP codes): asked twice.
CONFIRM = {("queue", "critical"), ("type", "sms.otp")}

#: The actor of automatic resumes (``resume_at`` passed).
AUTO = audit.Actor(label="system:pauses")


def needs_confirmation(kind: str, target: str) -> bool:
    """Whether holding ``kind``/``target`` needs a second confirmation."""
    return (kind, target) in CONFIRM


def known_providers() -> list[str]:
    """Every provider of the active catalogue: defined ones and those a job type names."""
    cat = active()
    return sorted(set(cat.providers) | {jt.policy.provider for jt in cat.job_types.values() if jt.policy.provider})


def known_types() -> list[str]:
    """Every job type name of the active catalogue."""
    return sorted({jt.name for jt in active().job_types.values()})


def resolve_target(conn: psycopg.Connection, kind: str, target: str) -> tuple[str, Any]:
    """``(target, tenant_id)`` for a hold of ``kind``; ``OpsError`` (``invalid_kind``,
    ``not_found``) for an unknown kind or target.  A tenant is named by its slug."""
    target = (target or "").strip()
    if kind not in KINDS:
        raise OpsError("kind must be one of %(kinds)s", "invalid_kind", params={"kinds": ", ".join(KINDS)})
    if kind == "queue" and target not in QUEUE_NAMES:
        raise OpsError("no queue %(target)s", "not_found", params={"target": target})
    if kind == "type" and target not in known_types():
        raise OpsError("no job type %(target)s", "not_found", params={"target": target})
    if kind == "provider" and target not in known_providers():
        raise OpsError("no provider %(target)s", "not_found", params={"target": target})
    if kind == "tenant":
        row = db.one(conn, "tenant_get_by_slug", {"slug": target})
        if row is None:
            raise OpsError("no tenant %(target)s", "not_found", params={"target": target})
        return target, row["id"]
    return target, None


def _audit_view(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {"reason": row["reason"], "paused_by": row["paused_by"],
            "resume_at": row["resume_at"].isoformat() if row["resume_at"] else None}


def pause(conn: psycopg.Connection, actor: audit.Actor, kind: str, target: str, reason: str | None, *,
          resume_at: datetime | None = None, request_key: str | None = None, confirmed: bool = False,
          now: datetime | None = None) -> dict:
    """Hold ``kind``/``target`` (or change an existing hold's reason and resume time) and return the row.

    Errors (``OpsError``): ``reason_required``, ``invalid_kind``, ``not_found``,
    ``resume_at_past`` (a resume time not in the future), ``confirmation_required``.
    """
    target, tenant_id = resolve_target(conn, kind, target)
    if resume_at is not None:
        if resume_at.tzinfo is None:
            resume_at = resume_at.replace(tzinfo=timezone.utc)
        if resume_at <= (now or datetime.now(timezone.utc)):
            raise OpsError("the resume time must be in the future", "resume_at_past")
    if needs_confirmation(kind, target) and not confirmed:
        raise OpsError("holding %(target)s needs a second confirmation", "confirmation_required",
                       params={"target": target})

    def perform(ctx: audit.ActionContext) -> dict:
        before = db.one(conn, "pause_get_for_update", {"kind": kind, "target": target})
        row = db.one(conn, "pause_upsert", {"kind": kind, "target": target, "reason": ctx.reason,
                                            "paused_by": actor.label, "resume_at": resume_at,
                                            "tenant_id": tenant_id, "now": now})
        ctx.write(tenant_id=tenant_id, before=_audit_view(before), after=_audit_view(row))
        return row

    def repeat(previous: dict) -> dict:
        return db.one(conn, "pause_get_for_update", {"kind": kind, "target": target}) or {}

    return audit.operator_action(conn, actor, "pause", target_type=kind, target_id=target, reason=reason,
                                 request_key=request_key, perform=perform, repeat=repeat)


def resume(conn: psycopg.Connection, actor: audit.Actor, kind: str, target: str, reason: str | None, *,
           request_key: str | None = None) -> dict:
    """Release the hold on ``kind``/``target`` and return the row that was deleted.

    Errors: ``reason_required``, ``invalid_kind``, ``not_paused``.
    """
    if kind not in KINDS:
        raise OpsError("kind must be one of %(kinds)s", "invalid_kind", params={"kinds": ", ".join(KINDS)})
    target = (target or "").strip()

    def perform(ctx: audit.ActionContext) -> dict:
        row = db.one(conn, "pause_delete", {"kind": kind, "target": target})
        if row is None:
            raise OpsError("%(target)s is not paused", "not_paused", status=409, params={"target": target})
        ctx.write(tenant_id=row["tenant_id"], before=_audit_view(row), after=None)
        return row

    def repeat(previous: dict) -> dict:
        return {"kind": kind, "target": target}

    return audit.operator_action(conn, actor, "resume", target_type=kind, target_id=target, reason=reason,
                                 request_key=request_key, perform=perform, repeat=repeat)


def resume_expired(conn: psycopg.Connection, now: datetime | None = None) -> int:
    """Delete the holds whose ``resume_at`` has passed, each audited as an automatic resume;
    returns how many.  (The claim ignores them already: this only tidies and records.)"""
    with conn.transaction():
        rows = db.all_rows(conn, "pause_delete_expired", {"now": now})
        for row in rows:
            audit.record(conn, AUTO, "resume", target_type=row["kind"], target_id=row["target"],
                         tenant_id=row["tenant_id"], reason="automatic resume (resume_at passed)",
                         before=_audit_view(row))
    return len(rows)


def list_pauses(conn: psycopg.Connection, *, now: datetime | None = None) -> list[dict]:
    """The holds in force, by kind then target (expired ones are released first)."""
    resume_expired(conn, now)
    return db.all_rows(conn, "pause_list", {"now": now})


@dataclass(frozen=True)
class Holds:
    """The holds in force, as the claim takes them (``job_claim_many``'s parameters).

    Read with :func:`read_holds`; a claim made without one reads its own
    (:func:`opsboard.jobqueue.claim`), and the worker keeps one refreshed on
    every ``opsboard_pauses`` notification and at least every second
    (:class:`worker.fetcher.HoldsCache`).  A hold whose ``resume_at`` has
    passed at the claim's ``now`` is left out, whether or not its row is gone yet.
    """

    rows: tuple[dict, ...] = ()
    #: Live concurrency limits, ``(kind, target, value)`` sorted (see :func:`set_limit`);
    #: kind ``queue`` is a queue's slots per worker.
    limit_overrides: tuple[tuple[str, str, int], ...] = ()
    #: Tenants' concurrency limits, ``(tenant_id, max_running)`` (see :func:`set_tenant_limits`).
    tenant_limits: tuple[tuple[Any, int], ...] = ()

    def queue_slots(self, queue: str) -> int | None:
        """The slots per worker an operator set live for ``queue`` (``None``: each worker's own)."""
        for kind, target, value in self.limit_overrides:
            if kind == "queue" and target == queue:
                return value
        return None

    def params(self, queue: str, now: datetime | None = None) -> dict:
        at = now or datetime.now(timezone.utc)
        live = [r for r in self.rows if r["resume_at"] is None or r["resume_at"] > at]
        providers = {r["target"] for r in live if r["kind"] == "provider"}
        types = {r["target"] for r in live if r["kind"] == "type"}
        if providers:
            names, provs = jobtypes.provider_types()
            types |= {t for t, p in zip(names, provs) if p in providers}
        return {"queue_held": any(r["kind"] == "queue" and r["target"] == queue for r in live),
                "held_tenants": [r["tenant_id"] for r in live if r["kind"] == "tenant"],
                "held_types": sorted(types),
                # NULL when no tenant is limited (the usual case): the claim then runs no function.
                "tenant_caps": Jsonb({str(t): n for t, n in self.tenant_limits}) if self.tenant_limits else None}


NO_HOLDS = Holds()


def read_holds(conn: psycopg.Connection) -> Holds:
    """The holds in force now (one small read; writes nothing)."""
    return Holds(tuple(db.all_rows(conn, "pause_list", {"now": None})),
                 tuple((r["kind"], r["target"], r["value"]) for r in db.all_rows(conn, "pause_limit_list")),
                 tuple((r["id"], r["max_running"]) for r in db.all_rows(conn, "tenant_max_running_list")))


#: What :func:`set_limit` changes: a type's or a provider's concurrency, a queue's slots per worker.
LIMIT_KINDS = ("type", "provider", "queue", "key")


def keyed_types() -> list[str]:
    """Job types with a concurrency key (issue 50): their per-key limit may be set live (kind ``key``)."""
    return sorted({jt.name for jt in active().job_types.values() if jt.concurrency_key is not None})


def limit_bounds(kind: str) -> tuple[int, int]:
    """The values :func:`set_limit` accepts for ``kind``."""
    return (1, QUEUE_SLOTS_MAX) if kind == "queue" else (1, 100000)


def catalogue_limit(kind: str, target: str) -> int | None:
    """The catalogue's concurrency limit of a job type (the lowest over its versions) or a provider
    (``None`` for a queue: each worker's own ``OPSBOARD_WORKER_QUEUES``)."""
    if kind == "queue":
        return None
    cat = active()
    if kind == "key":
        values = [jt.policy.key_concurrency for jt in cat.job_types.values()
                  if jt.name == target and jt.policy.key_concurrency is not None]
        return min(values) if values else None
    if kind == "provider":
        prov = cat.providers.get(target)
        return prov.concurrency if prov is not None else None
    values = [jt.policy.concurrency for jt in cat.job_types.values()
              if jt.name == target and jt.policy.concurrency is not None]
    return min(values) if values else None


def list_limits(conn: psycopg.Connection) -> dict[tuple[str, str], dict]:
    """Live limits by ``(kind, target)``."""
    return {(r["kind"], r["target"]): r for r in db.all_rows(conn, "pause_limit_list")}


#: Concurrency keys shown with their running jobs at most (the busiest).
KEYS_SHOWN = 20


def keys_in_flight(conn: psycopg.Connection, limit: int = KEYS_SHOWN) -> list[dict]:
    """The busiest concurrency keys (issue 50): ``type``, ``key``, ``running`` and the type's limit per key
    (``limit``: the live one, else the catalogue's; ``live``: whether an operator set it)."""
    rows = db.all_rows(conn, "job_keys_in_flight", {"limit": limit})
    if not rows:
        return []
    live = list_limits(conn)
    for r in rows:
        lim = live.get(("key", r["type"]))
        r["limit"], r["live"] = (lim["value"], True) if lim else (catalogue_limit("key", r["type"]), False)
    return rows


def set_limit(conn: psycopg.Connection, actor: audit.Actor, kind: str, target: str, value: int | None,
              reason: str | None, *, request_key: str | None = None) -> dict:
    """Set (or with ``value=None`` remove) the fleet-wide concurrency limit of a job type or a
    provider, the running jobs per concurrency key of a job type with one (kind ``key``), or the slots
    per worker of a queue (kind ``queue``: every worker serving it
    grows or shrinks its slot threads; ``None`` goes back to each worker's configuration),
    effective at every worker's next re-read (NOTIFY, at most a second); a worker started
    later reads it before its first slot.  Audited as ``limit.set`` with the old value (the
    live one, else the catalogue's).  Errors: ``invalid_kind``, ``not_found``, ``invalid_limit``."""
    if kind not in LIMIT_KINDS:
        raise OpsError("kind must be one of %(kinds)s", "invalid_kind", params={"kinds": ", ".join(LIMIT_KINDS)})
    if kind == "key":   # the running jobs per concurrency key of a job type (issue 50)
        target = (target or "").strip()
        if target not in keyed_types():
            raise OpsError("no job type %(target)s with a concurrency key", "not_found", params={"target": target})
    else:
        target, _ = resolve_target(conn, kind, target)
    low, high = limit_bounds(kind)
    if value is not None and not low <= value <= high:
        raise OpsError("a limit is a whole number from %(low)s to %(high)s", "invalid_limit",
                       params={"low": low, "high": high})

    def perform(ctx: audit.ActionContext) -> dict:
        old = db.one(conn, "pause_limit_get_for_update", {"kind": kind, "target": target})
        before = {"value": old["value"] if old else catalogue_limit(kind, target), "live": old is not None}
        if value is None:
            db.one(conn, "pause_limit_delete", {"kind": kind, "target": target})
            after = {"value": catalogue_limit(kind, target), "live": False}
        else:
            db.one(conn, "pause_limit_upsert", {"kind": kind, "target": target, "value": value,
                                                "changed_by": actor.label})
            after = {"value": value, "live": True}
        ctx.write(before=before, after=after)
        return {"kind": kind, "target": target, "before": before, "after": after}

    def repeat(previous: dict) -> dict:
        return {"kind": kind, "target": target, "before": previous.get("before"), "after": previous.get("after")}

    return audit.operator_action(conn, actor, "limit.set", target_type=kind, target_id=target, reason=reason,
                                 request_key=request_key, perform=perform, repeat=repeat)


#: :func:`set_tenant_limits`: leave this value as it is.
UNCHANGED = object()

#: Bounds of a tenant's limits: enqueue rate (jobs per second), burst, concurrency (running jobs).
TENANT_RATE_MAX = 1_000_000.0
TENANT_BURST_MAX = 1_000_000
TENANT_RUNNING_MAX = 100000


def tenant_limits(conn: psycopg.Connection, tenant_id) -> dict | None:
    """A tenant's own enqueue rate, burst and concurrency (``None`` each: the default / no limit)."""
    return db.one(conn, "tenant_limits_get_for_update", {"id": tenant_id})


def _tenant_limit_view(row: dict) -> dict:
    return {"rate": row["enqueue_rate"], "burst": row["enqueue_burst"], "max_running": row["max_running"]}


def set_tenant_limits(conn: psycopg.Connection, actor: audit.Actor, tenant: str, reason: str | None, *,
                      rate: Any = UNCHANGED, burst: Any = UNCHANGED, max_running: Any = UNCHANGED,
                      request_key: str | None = None) -> dict:
    """Change a tenant's (by slug) enqueue rate (jobs per second), burst, and concurrency (at most
    this many of its jobs run at once across every worker); ``None`` goes back to the default (no
    concurrency limit), :data:`UNCHANGED` keeps a value.  The rate is read by every admission
    (live at the next enqueue); the concurrency by every worker with the holds (NOTIFY, at most
    a second).  Audited as ``tenant.limits`` with the old and new values.

    Errors (``OpsError``): ``reason_required``, ``not_found``, ``invalid_limit``.
    """
    _, tenant_id = resolve_target(conn, "tenant", tenant)
    if rate is not UNCHANGED and rate is not None and not (0 < rate <= TENANT_RATE_MAX):
        raise OpsError("a rate is a number of jobs per second above 0 and at most %(high)s", "invalid_limit",
                       params={"high": int(TENANT_RATE_MAX)})
    for value, high in ((burst, TENANT_BURST_MAX), (max_running, TENANT_RUNNING_MAX)):
        if value is not UNCHANGED and value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                                             or not 1 <= value <= high):
            raise OpsError("a limit is a whole number from %(low)s to %(high)s", "invalid_limit",
                           params={"low": 1, "high": high})

    def perform(ctx: audit.ActionContext) -> dict:
        old = db.one(conn, "tenant_limits_get_for_update", {"id": tenant_id})
        row = db.one(conn, "tenant_limits_set", {
            "id": tenant_id,
            "rate": old["enqueue_rate"] if rate is UNCHANGED else (float(rate) if rate is not None else None),
            "burst": old["enqueue_burst"] if burst is UNCHANGED else burst,
            "max_running": old["max_running"] if max_running is UNCHANGED else max_running})
        before, after = _tenant_limit_view(old), _tenant_limit_view(row)
        ctx.write(tenant_id=tenant_id, before=before, after=after)
        return {"tenant": tenant, "tenant_id": tenant_id, "before": before, "after": after}

    def repeat(previous: dict) -> dict:
        return {"tenant": tenant, "tenant_id": tenant_id, "before": previous.get("before"),
                "after": previous.get("after")}

    return audit.operator_action(conn, actor, "tenant.limits", target_type="tenant", target_id=tenant,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


def held(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """``{kind: {target: row}}`` of :func:`list_pauses` rows, for pages that mark held things."""
    out: dict[str, dict[str, dict]] = {k: {} for k in KINDS}
    for r in rows:
        out[r["kind"]][r["target"]] = r
    return out
