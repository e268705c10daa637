"""What a customer is told of the SLA clock (opsboard.tickets.portal.promise) and which actions their page offers
(customer_actions): pure functions over a ticket row, no database."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from opsboard.tickets import portal, workflow

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


def _ticket(**kw) -> dict:
    base = {"status": "new", "first_response_due_at": NOW + timedelta(hours=1),
            "resolution_due_at": NOW + timedelta(hours=8), "first_responded_at": None, "paused_at": None,
            "resolved_at": None, "closed_at": None, "updated_at": NOW}
    return {**base, **kw}


@pytest.mark.parametrize("changes, kind, at", [
    ({}, "answer_by", NOW + timedelta(hours=1)),
    ({"first_responded_at": NOW - timedelta(minutes=5), "status": "in_progress"}, "resolve_by", NOW + timedelta(hours=8)),
    ({"first_response_due_at": NOW - timedelta(minutes=1)}, "late", NOW - timedelta(minutes=1)),
    ({"first_responded_at": NOW, "resolution_due_at": NOW - timedelta(seconds=1)}, "late", NOW - timedelta(seconds=1)),
    ({"status": "waiting_on_customer", "paused_at": NOW}, "your_turn", None),
    ({"first_response_due_at": None, "resolution_due_at": None}, "open", None),
    ({"status": "cancelled", "closed_at": None}, "closed", NOW),
])
def test_the_promise_follows_the_clock(changes, kind, at):
    p = portal.promise(_ticket(**changes), NOW)
    assert (p.kind, p.at) == (kind, at)


def test_a_resolved_ticket_says_until_when_it_can_be_reopened():
    resolved = NOW - timedelta(days=2)
    p = portal.promise(_ticket(status="resolved", resolved_at=resolved, paused_at=resolved), NOW)
    assert (p.kind, p.at, p.until) == ("resolved", resolved, resolved + workflow.REOPEN_WINDOW)
    old = NOW - workflow.REOPEN_WINDOW - timedelta(seconds=1)
    assert portal.promise(_ticket(status="resolved", resolved_at=old), NOW).until is None


def test_the_page_offers_what_the_workflow_lets_a_requester_do():
    assert sorted(portal.customer_actions(_ticket(), NOW)) == ["cancel", "reply"]
    # Waiting on the customer: they answer by replying (the service resumes the clock), no separate resume.
    assert "resume" not in portal.customer_actions(_ticket(status="waiting_on_customer"), NOW)
    assert portal.customer_actions(_ticket(status="resolved", resolved_at=NOW - timedelta(days=1)), NOW) == ["reopen"]
    assert portal.customer_actions(_ticket(status="resolved", resolved_at=NOW - timedelta(days=8)), NOW) == []
    assert portal.customer_actions(_ticket(status="closed"), NOW) == []
    assert portal.customer_actions(_ticket(status="cancelled"), NOW) == []
