"""The SLA clock: pure arithmetic, no database, ``now`` always passed in.

A ticket's targets (first response, resolution) are durations of *SLA time*:
wall-clock time, or only the policy's business hours in its time zone.  The
clock stops while the ticket waits on the customer: the paused stretch (in
SLA time) is added to both due times when it resumes.  A priority change
recomputes the due times from the creation time with the new targets, keeping
the pauses already accounted.

The badge (on track / at risk / breached / paused / met) is computed by the
SQL function ``ticket_sla_state`` (migration 0012), so lists can filter on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from ..persian import load_zone


@dataclass(frozen=True)
class BusinessHours:
    """Working days (Monday=0) and daily hours in ``time_zone``."""

    days: frozenset[int]
    start: time
    end: time
    time_zone: str = "UTC"

    @classmethod
    def parse(cls, spec: dict | None, time_zone: str = "UTC") -> "BusinessHours | None":
        """``{"days": [0,1,2,3,4], "start": "09:00", "end": "17:00"}`` or ``None`` (24x7)."""
        if not spec:
            return None
        days = frozenset(int(d) for d in spec.get("days", range(5)))
        start, end = time.fromisoformat(spec.get("start", "09:00")), time.fromisoformat(spec.get("end", "17:00"))
        if not days or not days <= set(range(7)) or start >= end:
            raise ValueError("business hours need working days 0-6 and start < end")
        if load_zone(time_zone) is None:
            raise ValueError("unknown time zone")
        return cls(days, start, end, time_zone)


@dataclass(frozen=True)
class Policy:
    first_response_minutes: int
    resolution_minutes: int
    hours: BusinessHours | None = None


def _windows(hours: BusinessHours, moment: datetime):
    """Working windows (start, end) in UTC-aware datetimes, from the day of ``moment`` on."""
    zone = ZoneInfo(hours.time_zone)
    day = moment.astimezone(zone).date()
    for _ in range(3660):  # ten years of days: a policy with no working day is refused at parse
        if day.weekday() in hours.days:
            yield (datetime.combine(day, hours.start, zone), datetime.combine(day, hours.end, zone))
        day += timedelta(days=1)


def add_sla_time(start: datetime, seconds: float, hours: BusinessHours | None) -> datetime:
    """The moment ``seconds`` of SLA time after ``start``."""
    if hours is None:
        return start + timedelta(seconds=seconds)
    left = seconds
    for w_start, w_end in _windows(hours, start):
        if w_end <= start:
            continue
        begin = max(start, w_start)
        span = (w_end - begin).total_seconds()
        if left <= span:
            return begin + timedelta(seconds=left)
        left -= span
    raise ValueError("SLA target too far in the future")


def sla_seconds_between(start: datetime, end: datetime, hours: BusinessHours | None) -> float:
    """SLA time elapsed from ``start`` to ``end`` (0 when ``end`` is not later)."""
    if end <= start:
        return 0.0
    if hours is None:
        return (end - start).total_seconds()
    total = 0.0
    for w_start, w_end in _windows(hours, start):
        if w_start >= end:
            break
        begin, finish = max(start, w_start), min(end, w_end)
        if finish > begin:
            total += (finish - begin).total_seconds()
    return total


@dataclass(frozen=True)
class DueTimes:
    first_response_due_at: datetime
    resolution_due_at: datetime


def due_times(policy: Policy, created_at: datetime, paused_seconds: float = 0) -> DueTimes:
    """Both due times: the targets plus the paused SLA time, counted from creation."""
    return DueTimes(
        add_sla_time(created_at, policy.first_response_minutes * 60 + paused_seconds, policy.hours),
        add_sla_time(created_at, policy.resolution_minutes * 60 + paused_seconds, policy.hours),
    )


def pause(paused_at: datetime | None, now: datetime) -> datetime:
    """The clock stops at ``now`` (a second pause keeps the first moment)."""
    return paused_at or now


def resume(paused_at: datetime | None, paused_seconds: float, now: datetime,
           hours: BusinessHours | None) -> float:
    """The paused SLA seconds after resuming at ``now``."""
    if paused_at is None:
        return paused_seconds
    return paused_seconds + sla_seconds_between(paused_at, now, hours)
