"""Recurring jobs: cron schedules declared in code next to their job types.

A schedule names a cron expression (parsed by ``croniter``), the time zone it
is read in, and the job to enqueue at each slot (per tenant, or once).  The
leader's scheduler service (``worker/services/scheduler.py``) calls
:func:`run_due`; for each schedule, in one transaction:

* the schedule's row in ``schedule_state`` is locked, so two schedulers (two
  leaders for a moment, or a test running two) handle a slot one after the
  other, and the second finds it done;
* the latest slot at or before *now* is compared with the last one handled:
  after downtime only that latest slot fires, once, however many were missed;
* each job carries the idempotency key ``<schedule>@<slot>``, unique per
  tenant and type among live jobs: a slot can never make two jobs even if its
  state row were lost.

The first time a schedule is seen, its latest slot is taken as the baseline
without firing (a new schedule does not run for a slot from before it
existed); it fires from the next slot on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable
from zoneinfo import ZoneInfo

from croniter import croniter

from . import catalogue as _catalogue
from . import db, jobqueue
from .auth import TenantScope


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str
    time_zone: str
    job_type: str
    #: ``payload(slot, tenant)`` -> the job's payload (``tenant`` is None unless per_tenant).
    payload: Callable[[datetime, Any], dict]
    per_tenant: bool = False
    #: For a schedule that is not per tenant: the tenant slug its job belongs to.
    tenant_slug: str | None = None
    description: str = ""
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "zone", ZoneInfo(self.time_zone))

    def slot_at_or_before(self, moment: datetime) -> datetime:
        """The latest slot not after ``moment`` (aware, in the schedule's zone)."""
        # get_prev is strictly before its start; a second later includes a moment exactly on a slot.
        return croniter(self.cron, moment.astimezone(self.zone) + timedelta(seconds=1)).get_prev(datetime)

    def next_slot_after(self, moment: datetime) -> datetime:
        return croniter(self.cron, moment.astimezone(self.zone)).get_next(datetime)

    def key(self, slot: datetime) -> str:
        """The idempotency key of a slot's job: the schedule and the slot in UTC."""
        return f"{self.name}@{slot.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def define_schedule(cat: _catalogue.Catalogue, name: str, cron: str, *, job_type: str, payload: Callable[[datetime, Any], dict],
                    time_zone: str = "UTC", per_tenant: bool = False, tenant_slug: str | None = None,
                    description: str = "") -> Schedule:
    """Register a recurring job in ``cat``; redefining a name replaces it."""
    if not croniter.is_valid(cron):
        raise ValueError(f"schedule {name}: {cron!r} is not a cron expression")
    if not per_tenant and not tenant_slug:
        raise ValueError(f"schedule {name}: give per_tenant=True or the tenant_slug its job belongs to")
    s = Schedule(name, cron, time_zone, job_type, payload, per_tenant, tenant_slug, description)
    cat.schedules[name] = s
    cat.changed()
    return s


def all_schedules() -> list[Schedule]:
    """The active catalogue's schedules, by name."""
    return sorted(_catalogue.active().schedules.values(), key=lambda s: s.name)


def fire_due(conn, schedule: Schedule, now: datetime | None = None) -> int:
    """Fire ``schedule``'s latest due slot if it was not handled yet; returns the jobs enqueued."""
    with conn.transaction():
        current = db.now(conn, now)
        db.execute(conn, "schedule_state_ensure", {"name": schedule.name})
        state = db.one(conn, "schedule_state_lock", {"name": schedule.name})
        slot = schedule.slot_at_or_before(current)
        last = state["last_slot"]
        if last is not None and slot <= last:
            return 0
        fired = last is not None
        jobs = 0
        if fired:
            if schedule.per_tenant:
                tenants = db.all_rows(conn, "schedule_tenants")
            else:
                row = db.one(conn, "tenant_get_by_slug", {"slug": schedule.tenant_slug})
                tenants = [row] if row else []
            key = schedule.key(slot)
            new = [jobqueue.NewJob(schedule.job_type, schedule.payload(slot, t if schedule.per_tenant else None),
                                tenant=t["id"], idempotency_key=key) for t in tenants]
            jobs = len(jobqueue.enqueue_many(conn, new))
        db.execute(conn, "schedule_state_set", {"name": schedule.name, "slot": slot, "fired": fired,
                                                "jobs": jobs, "now": now})
        return jobs


def run_due(conn, now: datetime | None = None) -> int:
    """Fire every schedule's due slot; returns the jobs enqueued."""
    return sum(fire_due(conn, s, now) for s in all_schedules())


def overview(conn, scope: TenantScope, now: datetime | None = None) -> list[dict]:
    """Each schedule with its next slot and its last fired slot, for the dashboard, inside ``scope``.

    A schedule bound to one tenant (``tenant_slug``) is that tenant's: shown only to a scope that holds
    it.  The last slot's job count of a per-tenant schedule counts every tenant's jobs: operator staff
    only (issue 42)."""
    current = db.now(conn, now)
    states = {r["name"]: r for r in db.all_rows(conn, "schedule_state_list")}
    out = []
    for s in all_schedules():
        if s.tenant_slug is not None and not scope.all:
            row = db.one(conn, "tenant_get_by_slug", {"slug": s.tenant_slug})
            if row is None or not scope.allows(row["id"]):
                continue
        st = states.get(s.name) or {}
        nxt = s.next_slot_after(current)
        out.append({"name": s.name, "cron": s.cron, "time_zone": s.time_zone, "job_type": s.job_type,
                    "per_tenant": s.per_tenant, "description": s.description,
                    "next_slot": nxt, "next_slot_utc": nxt.astimezone(timezone.utc), "last_slot": st.get("last_slot"),
                    "last_fired_at": st.get("last_fired_at"),
                    "last_jobs": st.get("last_jobs") if scope.all or not s.per_tenant else None})
    return out
