"""The SLA clock, pure: due times, pause/resume, priority change, business hours."""
from datetime import datetime, timedelta, timezone

import pytest

from opsboard.tickets import sla, workflow

UTC = timezone.utc
MON_9 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)  # a Monday
HOURS = sla.BusinessHours.parse({"days": [0, 1, 2, 3, 4], "start": "09:00", "end": "17:00"}, "UTC")


def test_due_times_wall_clock():
    due = sla.due_times(sla.Policy(60, 480), MON_9)
    assert due.first_response_due_at == MON_9 + timedelta(hours=1)
    assert due.resolution_due_at == MON_9 + timedelta(hours=8)


def test_pause_and_resume_add_the_paused_time():
    paused_at = sla.pause(None, MON_9 + timedelta(minutes=30))
    assert sla.pause(paused_at, MON_9 + timedelta(hours=1)) == paused_at  # a second pause keeps the first moment
    paused = sla.resume(paused_at, 0, MON_9 + timedelta(minutes=90), None)
    assert paused == 3600
    due = sla.due_times(sla.Policy(60, 480), MON_9, paused)
    assert due.resolution_due_at == MON_9 + timedelta(hours=9)
    assert sla.resume(None, 42, MON_9, None) == 42


def test_priority_change_keeps_pauses():
    before = sla.due_times(sla.Policy(240, 1440), MON_9, 600)
    after = sla.due_times(sla.Policy(15, 240), MON_9, 600)
    assert after.first_response_due_at == MON_9 + timedelta(minutes=25)
    assert after.resolution_due_at < before.resolution_due_at


def test_business_hours_skip_nights_and_weekends():
    friday_16 = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)
    # 2 hours of SLA time from Friday 16:00: one hour Friday, one Monday 09:00-10:00
    assert sla.add_sla_time(friday_16, 7200, HOURS) == datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
    # a start at night begins counting at the next opening
    assert sla.add_sla_time(datetime(2026, 12, 1, 22, 0, tzinfo=UTC), 60, HOURS) == \
        datetime(2026, 12, 2, 9, 1, tzinfo=UTC)
    assert sla.sla_seconds_between(friday_16, datetime(2026, 12, 7, 10, 0, tzinfo=UTC), HOURS) == 7200
    assert sla.sla_seconds_between(MON_9, MON_9, HOURS) == 0


def test_business_hours_in_a_time_zone():
    tehran = sla.BusinessHours.parse({"days": [5, 6, 0, 1, 2], "start": "08:00", "end": "16:00"}, "Asia/Tehran")
    start = datetime(2026, 11, 30, 4, 30, tzinfo=UTC)  # 08:00 in Tehran (UTC+3:30), a Monday
    assert sla.add_sla_time(start, 3600, tehran) == start + timedelta(hours=1)


def test_bad_business_hours_refused():
    with pytest.raises(ValueError):
        sla.BusinessHours.parse({"days": [], "start": "09:00", "end": "17:00"})
    with pytest.raises(ValueError):
        sla.BusinessHours.parse({"days": [0], "start": "17:00", "end": "09:00"})


def test_workflow_declares_every_status():
    reachable = {t.target for t in workflow.TRANSITIONS.values()} | {"new"}
    assert reachable == set(workflow.STATUSES)
    assert workflow.allowed_transitions("resolved", "requester") == ["reopen"]
    assert "close" not in workflow.allowed_transitions("new", "support_agent")
