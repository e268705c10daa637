"""Tickets: the whole transition matrix, audit + outbox per action, internal-note visibility, SLA jobs."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from opsboard.errors import OpsError
from opsboard.tickets import service, workflow
from tests.support.tickets import make_desk

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def desk(conn):
    return make_desk(conn)


def _open(conn, desk, *, category="access", priority="normal", now=T0):
    return service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="Cannot log in",
                                 body="Since this morning.", category=category, priority=priority, now=now)


def _force_status(conn, ticket, status):
    conn.execute("""UPDATE tickets SET status = %(s)s::ticket_status, decision = 'approved', decision_reason = 'ok',
                    resolution_code = CASE WHEN %(s)s::text IN ('resolved', 'closed') THEN 'fixed' END,
                    resolution_summary = CASE WHEN %(s)s::text IN ('resolved', 'closed') THEN 'done' END,
                    resolved_at = CASE WHEN %(s)s::text IN ('resolved', 'closed') THEN %(at)s::timestamptz END,
                    paused_at = CASE WHEN %(s)s::text IN ('waiting_on_customer', 'resolved') THEN %(at)s::timestamptz END
                    WHERE id = %(id)s""", {"s": status, "id": ticket["id"], "at": T0})


def _fields(action, desk):
    return {"reply": {"body": "Here is what we found."}, "note": {"body": "Customer is on the old plan."},
            "assign": {"assignee_id": desk.agent.id}, "decide": {"decision": "approved", "reason": "Manager said yes"},
            "resolve": {"resolution_code": "fixed", "resolution_summary": "Password reset"},
            "set_priority": {"priority": "high"}}.get(action, {})


def _counts(conn, ticket_id):
    audit_rows = conn.execute("SELECT count(*) AS n FROM audit_log WHERE target_id = %s", (str(ticket_id),)).fetchone()
    events = conn.execute("SELECT count(*) AS n FROM outbox_events WHERE aggregate_id = %s", (str(ticket_id),)).fetchone()
    return audit_rows["n"], events["n"]


@pytest.mark.parametrize("status", workflow.STATUSES)
@pytest.mark.parametrize("role", ["admin", "support_agent", "requester", "ops"])
def test_transition_matrix(conn, desk, status, role):
    """Every status x action x role: allowed exactly as declared, else refused with the declared code;
    every allowed action leaves one audit row and one outbox event."""
    for action, declared in workflow.ALL.items():
        with pytest.raises(_Rollback):
            with conn.transaction():
                ticket = _open(conn, desk)
                _force_status(conn, ticket, status)
                audit_before, events_before = _counts(conn, ticket["id"])
                expected = role in declared.roles and status in declared.sources
                try:
                    row = service.act(conn, ticket["id"], action, desk.caller(role), scope=desk.scope,
                                      fields=_fields(action, desk), now=T0 + timedelta(hours=1))
                except OpsError as exc:
                    assert not expected, f"{role} {action} on {status} refused: {exc.code} {exc}"
                    if role == "ops":
                        assert exc.code == "not_found"
                    elif role not in declared.roles:
                        assert (exc.code, exc.status) == ("forbidden", 403)
                    else:
                        assert (exc.code, exc.status) == ("invalid_transition", 409)
                        assert exc.allowed == workflow.allowed_transitions(status, role)
                    assert _counts(conn, ticket["id"]) == (audit_before, events_before)
                else:
                    assert expected, f"{role} {action} on {status} was allowed"
                    if declared.target:
                        assert row["status"] == declared.target
                    audit_after, events_after = _counts(conn, ticket["id"])
                    assert audit_after == audit_before + 1
                    resumed = action == "reply" and role == "requester" and status == "waiting_on_customer"
                    assert events_after == events_before + (2 if resumed else 1)
                raise _Rollback


class _Rollback(Exception):
    pass


def test_invalid_transition_lists_allowed(conn, desk):
    t = _open(conn, desk)
    with pytest.raises(OpsError) as err:
        service.act(conn, t["id"], "close", desk.caller("support_agent"), scope=desk.scope)
    assert err.value.status == 409 and err.value.allowed == ["triage", "start"]
    assert "allowed: triage, start" in str(err.value)


def test_guards(conn, desk):
    agent = desk.caller("support_agent")
    t = _open(conn, desk)  # an access request
    service.act(conn, t["id"], "start", agent, scope=desk.scope)
    with pytest.raises(OpsError) as err:
        service.act(conn, t["id"], "resolve", agent, scope=desk.scope,
                    fields={"resolution_code": "fixed", "resolution_summary": "done"})
    assert err.value.code == "decision_required"
    with pytest.raises(OpsError) as err:
        service.act(conn, t["id"], "decide", agent, scope=desk.scope, fields={"decision": "maybe", "reason": "x"})
    assert err.value.code == "invalid_decision"
    service.act(conn, t["id"], "decide", agent, scope=desk.scope, fields={"decision": "rejected", "reason": "No"})
    with pytest.raises(OpsError) as err:
        service.act(conn, t["id"], "resolve", agent, scope=desk.scope, fields={"resolution_code": "fixed"})
    assert err.value.code == "resolution_summary_required"
    row = service.act(conn, t["id"], "resolve", agent, scope=desk.scope, now=T0,
                      fields={"resolution_code": "rejected", "resolution_summary": "Not allowed by policy"})
    assert row["status"] == "resolved" and row["decision"] == "rejected"
    with pytest.raises(OpsError) as err:  # reopen window
        service.act(conn, t["id"], "reopen", desk.caller("requester"), scope=desk.scope,
                    now=T0 + workflow.REOPEN_WINDOW + timedelta(seconds=1))
    assert err.value.code == "reopen_window_passed"
    billing = _open(conn, desk, category="billing")
    with pytest.raises(OpsError) as err:
        service.act(conn, billing["id"], "decide", agent, scope=desk.scope, fields={"decision": "approved",
                                                                                      "reason": "x"})
    assert err.value.code == "not_a_request"


def test_request_key_makes_a_double_submit_harmless(conn, desk):
    t = _open(conn, desk)
    agent = desk.caller("support_agent")
    a = service.act(conn, t["id"], "triage", agent, scope=desk.scope, request_key="k1")
    b = service.act(conn, t["id"], "triage", agent, scope=desk.scope, request_key="k1")
    assert a["status"] == b["status"] == "triaged"
    assert _counts(conn, t["id"])[0] == 2  # create + one triage


def test_per_tenant_numbers(conn, desk):
    other = make_desk(conn)
    assert [_open(conn, desk)["number"] for _ in range(3)] == [1, 2, 3]
    assert _open(conn, other)["number"] == 1


# ---------------------------------------------------------------- visibility

def test_internal_notes_only_for_agents_of_the_tenant(conn, desk):
    t = _open(conn, desk)
    service.act(conn, t["id"], "note", desk.caller("support_agent"), scope=desk.scope,
                fields={"body": "SECRET internal remark"})
    service.act(conn, t["id"], "reply", desk.caller("support_agent"), scope=desk.scope,
                fields={"body": "Public answer"})
    msgs, _ = service.timeline(conn, desk.scope, t["id"], desk.agent.id)
    assert [m["kind"] for m in msgs].count("internal_note") == 1
    # the requester, through the public timeline (customer API)
    pub, _ = service.public_timeline(conn, desk.tenant["id"], desk.requester["id"], t["id"])
    assert pub and all("SECRET" not in m["body"] for m in pub) and "Public answer" in [m["body"] for m in pub]
    # the requester through the agent query too (viewer without an agent membership)
    msgs, _ = service.timeline(conn, desk.scope, t["id"], desk.requester["id"])
    assert all(m["kind"] != "internal_note" for m in msgs)
    # an ops user of the same tenant (no ticket role)
    msgs, _ = service.timeline(conn, desk.scope, t["id"], desk.ops.id)
    assert all(m["kind"] != "internal_note" for m in msgs)
    # another tenant's agent: neither the ticket nor its notes
    other = make_desk(conn)
    msgs, _ = service.timeline(conn, desk.scope, t["id"], other.agent.id)
    assert all(m["kind"] != "internal_note" for m in msgs)
    assert service.get_ticket(conn, other.scope, t["id"]) is None
    assert service.timeline(conn, other.scope, t["id"], other.agent.id) == ([], [])
    with pytest.raises(OpsError) as err:
        service.act(conn, t["id"], "note", other.caller("support_agent"), scope=other.scope, fields={"body": "x"})
    assert err.value.code == "not_found"
    # the internal note's event says so, so customer notifications can skip it; no body in any event
    events = conn.execute("SELECT payload FROM outbox_events WHERE aggregate_id = %s AND type = 'ticket.message_added'",
                          (str(t["id"]),)).fetchall()
    assert sorted(e["payload"]["visibility"] for e in events) == ["internal", "public"]
    assert all("SECRET" not in str(e["payload"]) for e in events)


# ---------------------------------------------------------------- SLA

def _sla_jobs(conn, ticket_id):
    return conn.execute("SELECT available_at AS run_at, payload FROM jobs WHERE type = 'tickets.sla_check' AND payload->>'ticket_id' = %s "
                        "ORDER BY available_at", (str(ticket_id),)).fetchall()


def test_due_times_and_breach_jobs_planned_at_due(conn, desk):
    t = _open(conn, desk, priority="high")
    assert t["first_response_due_at"] == T0 + timedelta(minutes=60)
    assert t["resolution_due_at"] == T0 + timedelta(minutes=480)
    jobs = _sla_jobs(conn, t["id"])
    assert [(j["run_at"], j["payload"]["kind"]) for j in jobs] == [
        (T0 + timedelta(minutes=60), "first_response"), (T0 + timedelta(minutes=480), "resolution")]


def test_breach_job_fires_once_at_due_time(conn, desk):
    t = _open(conn, desk, priority="high")
    due = t["first_response_due_at"]
    assert service.check_breach(conn, t["id"], "first_response", due, now=due - timedelta(seconds=1)) is None
    row = service.check_breach(conn, t["id"], "first_response", due, now=due)
    assert row["first_response_breached_at"] == due
    assert service.check_breach(conn, t["id"], "first_response", due, now=due + timedelta(minutes=5)) is None
    n = conn.execute("SELECT count(*) AS n FROM outbox_events WHERE aggregate_id = %s AND type = 'ticket.sla_breached'",
                     (str(t["id"]),)).fetchone()["n"]
    assert n == 1
    got = service.get_ticket(conn, desk.scope, t["id"], now=due)
    assert got["sla_state"] == "breached"


def test_pause_resume_moves_due_and_replans(conn, desk):
    agent = desk.caller("support_agent")
    t = _open(conn, desk, priority="high")
    service.act(conn, t["id"], "start", agent, scope=desk.scope, now=T0 + timedelta(minutes=10))
    service.act(conn, t["id"], "reply", agent, scope=desk.scope, fields={"body": "Need your id"},
                now=T0 + timedelta(minutes=20))
    paused = service.act(conn, t["id"], "wait_on_customer", agent, scope=desk.scope, now=T0 + timedelta(minutes=30))
    assert paused["paused_at"] == T0 + timedelta(minutes=30)
    assert service.get_ticket(conn, desk.scope, t["id"], now=T0 + timedelta(hours=20))["sla_state"] == "paused"
    old_due = paused["resolution_due_at"]
    # the old job at the old due time finds the clock paused: nothing
    assert service.check_breach(conn, t["id"], "resolution", old_due, now=old_due) is None
    resumed = service.act(conn, t["id"], "reply", desk.caller("requester"), scope=desk.scope,
                          fields={"body": "Here it is"}, now=T0 + timedelta(minutes=30 + 120))
    assert resumed["status"] == "in_progress" and resumed["paused_at"] is None
    assert resumed["paused_seconds"] == 7200
    assert resumed["resolution_due_at"] == old_due + timedelta(hours=2)
    assert old_due + timedelta(hours=2) in [j["run_at"] for j in _sla_jobs(conn, t["id"])]
    # stale job: nothing; the new one breaches
    assert service.check_breach(conn, t["id"], "resolution", old_due, now=old_due + timedelta(hours=3)) is None
    assert service.check_breach(conn, t["id"], "resolution", resumed["resolution_due_at"],
                                now=resumed["resolution_due_at"]) is not None


def test_priority_change_recomputes_due(conn, desk):
    t = _open(conn, desk, priority="low")
    row = service.act(conn, t["id"], "set_priority", desk.caller("support_agent"), scope=desk.scope,
                      fields={"priority": "urgent"}, now=T0 + timedelta(minutes=5))
    assert row["first_response_due_at"] == T0 + timedelta(minutes=15)
    assert row["resolution_due_at"] == T0 + timedelta(minutes=240)
    assert T0 + timedelta(minutes=15) in [j["run_at"] for j in _sla_jobs(conn, t["id"])]
    assert service.get_ticket(conn, desk.scope, t["id"], now=T0 + timedelta(minutes=12))["sla_state"] == "at_risk"
    assert service.get_ticket(conn, desk.scope, t["id"], now=T0 + timedelta(minutes=5))["sla_state"] == "on_track"


def test_queue_filters_and_keyset(conn, desk):
    ids = [_open(conn, desk, category="billing")["id"] for _ in range(5)]
    service.act(conn, ids[0], "assign", desk.caller("admin"), scope=desk.scope, fields={"assignee_id": desk.agent.id})
    page1 = service.list_queue(conn, desk.scope, limit=3, now=T0)
    page2 = service.list_queue(conn, desk.scope, limit=3, after_id=page1[-1]["id"], now=T0)
    assert [r["id"] for r in page1 + page2] == list(reversed(ids))
    assert [r["id"] for r in service.list_queue(conn, desk.scope, assignee_id=desk.agent.id)] == [ids[0]]
    assert len(service.list_queue(conn, desk.scope, status="new", category="billing")) == 5
    assert service.list_queue(conn, desk.scope, sla_state="breached", now=T0 + timedelta(days=30))
    assert service.list_queue(conn, make_desk(conn).scope) == []
    with pytest.raises(OpsError):
        service.list_queue(conn, desk.scope, status="bogus")


def test_sla_filter_finds_exactly_the_tickets_with_that_badge(conn, desk):
    """The queue's SLA filter (written as the 0020 partial indexes' predicates) agrees with the badge
    (ticket_sla_state) for every state, at several injected times, across keyset pages."""
    agent = desk.caller("support_agent")
    urgent = [_open(conn, desk, priority="urgent", now=T0 + timedelta(minutes=m)) for m in (0, 5, 10)]
    low = [_open(conn, desk, priority="low", now=T0 + timedelta(minutes=m)) for m in (0, 1)]
    service.act(conn, urgent[0]["id"], "start", agent, scope=desk.scope, now=T0 + timedelta(minutes=1))
    service.act(conn, urgent[0]["id"], "reply", agent, scope=desk.scope, fields={"body": "On it"},
                now=T0 + timedelta(minutes=2))  # answered: the resolution target counts now
    service.act(conn, low[0]["id"], "start", agent, scope=desk.scope, now=T0 + timedelta(minutes=1))
    service.act(conn, low[0]["id"], "wait_on_customer", agent, scope=desk.scope, now=T0 + timedelta(minutes=2))
    service.act(conn, low[1]["id"], "cancel", desk.caller("admin"), scope=desk.scope, now=T0 + timedelta(minutes=3))
    due = urgent[1]["first_response_due_at"]
    service.check_breach(conn, urgent[1]["id"], "first_response", due, now=due)  # marked by the breach job
    for at in (T0 + timedelta(minutes=3), T0 + timedelta(minutes=14), T0 + timedelta(minutes=22), T0 + timedelta(days=2)):
        everything = service.list_queue(conn, desk.scope, now=at, limit=100)
        seen = set()
        for state in service.SLA_STATES:
            expected = [r["id"] for r in everything if r["sla_state"] == state]
            got, after = [], None
            while True:  # keyset pages of one
                page = service.list_queue(conn, desk.scope, sla_state=state, now=at, limit=1, after_id=after)
                if not page:
                    break
                got += [r["id"] for r in page]
                after = page[-1]["id"]
            assert got == expected, (at, state)
            if got:
                seen.add(state)
        assert len(everything) == len(urgent) + len(low)
    assert seen >= {"breached", "paused", "met"}
    states_at_22 = {r["sla_state"] for r in service.list_queue(conn, desk.scope, now=T0 + timedelta(minutes=22))}
    assert states_at_22 == {"on_track", "at_risk", "breached", "paused", "met"}


def test_queue_search_by_number_and_category(conn, desk):
    tickets = [_open(conn, desk, category=c) for c in ("billing", "access", "billing")]
    number = str(tickets[1]["number"])
    assert [r["id"] for r in service.list_queue(conn, desk.scope, search=number)] == [tickets[1]["id"]]
    assert [r["id"] for r in service.list_queue(conn, desk.scope, category="billing")] == [
        tickets[2]["id"], tickets[0]["id"]]
    assert service.list_queue(conn, desk.scope, category="no-such") == []


def test_demo_tickets_show_every_badge_in_both_languages(conn):
    from opsboard import auth
    from opsboard.tools.demo_tickets import seed_tickets

    slug = uuid.uuid4().hex[:6]
    ids = {"acme": auth.ensure_tenant(conn, f"acme-{slug}")["id"], "parsian": auth.ensure_tenant(conn, f"fa-{slug}")["id"]}
    auth.ensure_tenant(conn, f"op-{slug}", is_operator=True)
    email = f"support-{slug}@opsboard.demo"
    auth.create_user(conn, email, "correct horse battery", "support_agent", f"op-{slug}")
    assert seed_tickets(conn, ids, agent_email=email) == 9
    assert seed_tickets(conn, ids, agent_email=email) == 0  # once
    scope = auth.TenantScope(all=False, ids=tuple(ids.values()))
    rows = service.list_queue(conn, scope)
    assert {r["sla_state"] for r in rows} >= {"on_track", "at_risk", "breached", "paused", "met"}
    assert any("پیامک" in r["subject"] for r in rows)
    # The demo's end user has tickets of their own to open on /my/tickets (issue 43).
    own = conn.execute("SELECT t.status FROM tickets t JOIN users u ON u.id = t.requester_id "
                       "WHERE u.email = 'user@acme.demo'").fetchall()
    assert sorted(r["status"] for r in own) == ["resolved", "waiting_on_customer"]
    assert {r["status"] for r in rows} >= {"new", "triaged", "in_progress", "waiting_on_customer", "resolved", "closed"}


def test_sla_compliance_report_kind(conn, desk):
    from opsboard import reports

    kind = reports.get_kind("ticket_sla")
    t = _open(conn, desk, category="billing", priority="high")
    _open(conn, desk, category="billing", priority="high")
    service.check_breach(conn, t["id"], "first_response", t["first_response_due_at"], now=t["first_response_due_at"])
    slices = list(kind.plan(conn, desk.tenant["id"], kind.validate({}), 1000))
    rows = list(kind.rows(conn, desk.tenant["id"], {}, slices[0].lower, slices[0].upper))
    assert rows == [("billing", "high", 2, 1, 0, "50.0")]


def test_round_robin_among_the_tenants_support_agents(conn, desk):
    from opsboard import auth

    second = auth.create_user(conn, f"agent2-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery",
                              "support_agent", desk.tenant["slug"])
    picks = [service.create_ticket(conn, desk.caller("requester"), tenant_id=desk.tenant["id"], subject="s", body="b",
                                   round_robin=True)["assignee_id"] for _ in range(4)]
    assert set(picks) == {desk.agent.id, second["id"]}
    assert picks[0] != picks[1] and picks[:2] == picks[2:]
    events = conn.execute("SELECT count(*) AS n FROM outbox_events WHERE type = 'ticket.assigned' AND tenant_id = %s",
                          (desk.tenant["id"],)).fetchone()["n"]
    assert events == 4
