"""Incident controls (issue 28): held work is never claimed, stays pending in its
place and spends no attempt; holds are audited operator actions; an expired
resume time counts as released and is tidied (audited) by the pauses service."""
from datetime import timedelta

import pytest

from opsboard import audit, jobqueue, pauses
from opsboard.errors import OpsError
from opsboard.jobqueue import NewJob
from worker.services.pauses import Pauses

OPS = audit.Actor(label="ops@example.test")


def claim_all(conn, queue, now):
    out = []
    while True:
        rows = jobqueue.claim_batch(conn, queue, "w1", 50, 300, now=now)
        if not rows:
            return out
        out += rows


def statuses(conn):
    return {r["id"]: (r["status"], r["attempts"]) for r in conn.execute("SELECT id, status, attempts FROM jobs")}


def test_a_held_queue_claims_nothing_and_its_jobs_stay_pending_untouched(conn, tenant, t0):
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenant["id"]) for i in range(5)])
    pauses.pause(conn, OPS, "queue", "default", "db incident", now=t0)
    assert claim_all(conn, "default", t0 + timedelta(seconds=1)) == []
    assert set(statuses(conn).values()) == {("pending", 0)}
    pauses.resume(conn, OPS, "queue", "default", "fixed")
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    assert len(got) == 5
    assert all(r["attempts"] == 1 for r in got)


def test_a_held_type_is_skipped_and_the_others_run_in_order(conn, tenant, t0):
    jobs = []
    for i in range(6):
        jobs.append(NewJob("test.slow" if i % 2 else "test.record", {"key": str(i), "ms": 1}, tenant["id"]))
    jobqueue.enqueue_many(conn, jobs)
    pauses.pause(conn, OPS, "type", "test.slow", "failing", now=t0)
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    assert {r["type"] for r in got} == {"test.record"} and len(got) == 3
    held = conn.execute("SELECT status, attempts FROM jobs WHERE type = 'test.slow'").fetchall()
    assert [(r["status"], r["attempts"]) for r in held] == [("pending", 0)] * 3


def test_a_held_tenant_is_passed_over_and_others_still_claim(conn, make_tenant, t0):
    a, b = make_tenant(conn), make_tenant(conn)
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, t["id"]) for i in range(4) for t in (a, b)])
    pauses.pause(conn, OPS, "tenant", a["slug"], "flooding", now=t0)
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    assert {r["tenant_id"] for r in got} == {b["id"]} and len(got) == 4
    # Audited with the tenant, so the tenant's own staff see it.
    row = conn.execute("SELECT * FROM audit_log WHERE action = 'pause'").fetchone()
    assert row["tenant_id"] == a["id"] and row["reason"] == "flooding"


def test_a_held_provider_holds_every_type_that_names_it(conn, tenant, t0):
    jobqueue.enqueue_many(conn, [NewJob(t, {"key": t, "ms": 1}, tenant["id"])
                                 for t in ("test.sms_a", "test.sms_b", "test.record")])
    pauses.pause(conn, OPS, "provider", "test_sms_gateway", "provider outage", now=t0)
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    assert [r["type"] for r in got] == ["test.record"]


def test_an_expired_resume_time_counts_as_resumed_and_is_tidied_with_an_audit_row(conn, tenant, t0):
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": "x"}, tenant["id"])])
    pauses.pause(conn, OPS, "queue", "default", "short hold", resume_at=t0 + timedelta(minutes=5), now=t0)
    assert claim_all(conn, "default", t0 + timedelta(minutes=4)) == []
    assert Pauses().run_once(conn, now=t0 + timedelta(minutes=4)) == 0
    # Past resume_at: claimed even before anyone deletes the row.
    assert len(claim_all(conn, "default", t0 + timedelta(minutes=6))) == 1
    assert Pauses().run_once(conn, now=t0 + timedelta(minutes=6)) == 1
    rows = conn.execute("SELECT actor_label, action, reason FROM audit_log ORDER BY at, id").fetchall()
    assert [(r["actor_label"], r["action"]) for r in rows] == [("ops@example.test", "pause"), ("system:pauses", "resume")]
    assert pauses.list_pauses(conn) == []


def test_pause_refuses_bad_input_and_asks_twice_for_the_critical_queue_and_otp(conn, tenant, t0):
    with pytest.raises(OpsError) as e:
        pauses.pause(conn, OPS, "queue", "nope", "x")
    assert e.value.code == "not_found"
    with pytest.raises(OpsError) as e:
        pauses.pause(conn, OPS, "queue", "default", "  ")
    assert e.value.code == "reason_required"
    with pytest.raises(OpsError) as e:
        pauses.pause(conn, OPS, "queue", "default", "x", resume_at=t0 - timedelta(seconds=1), now=t0)
    assert e.value.code == "resume_at_past"
    for kind, target in (("queue", "critical"), ("type", "sms.otp")):
        with pytest.raises(OpsError) as e:
            pauses.pause(conn, OPS, kind, target, "x")
        assert e.value.code == "confirmation_required"
        pauses.pause(conn, OPS, kind, target, "x", confirmed=True)
    with pytest.raises(OpsError) as e:
        pauses.resume(conn, OPS, "type", "test.record", "x")
    assert e.value.code == "not_paused"
    assert [(p["kind"], p["target"]) for p in pauses.list_pauses(conn)] == [("queue", "critical"), ("type", "sms.otp")]


def test_a_double_submitted_pause_is_recorded_once(conn, t0):
    pauses.pause(conn, OPS, "queue", "bulk", "x", request_key="k1", now=t0)
    pauses.pause(conn, OPS, "queue", "bulk", "x", request_key="k1", now=t0)
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'pause'").fetchone()["n"] == 1


def test_live_limits_replace_the_catalogues_at_the_next_claim_and_are_audited_with_the_old_value(conn, tenant, t0):
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenant["id"]) for i in range(10)])
    jobqueue.enqueue_many(conn, [NewJob(t, {"key": f"{t}{i}", "ms": 1}, tenant["id"])
                                 for t in ("test.sms_a", "test.sms_b") for i in range(3)])
    r = pauses.set_limit(conn, OPS, "type", "test.record", 2, "db is struggling")
    assert r["before"] == {"value": None, "live": False} and r["after"] == {"value": 2, "live": True}
    pauses.set_limit(conn, OPS, "provider", "test_sms_gateway", 1, "vendor asked us to slow down")
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    by_type = {}
    for row in got:
        by_type[row["type"]] = by_type.get(row["type"], 0) + 1
    assert by_type.get("test.record") == 2
    assert by_type.get("test.sms_a", 0) + by_type.get("test.sms_b", 0) == 1
    r = pauses.set_limit(conn, OPS, "provider", "test_sms_gateway", None, "back to normal")
    assert r["before"] == {"value": 1, "live": True} and r["after"] == {"value": 2, "live": False}
    rows = conn.execute("SELECT before, after FROM audit_log WHERE action = 'limit.set' ORDER BY at, id").fetchall()
    assert [x["before"]["value"] for x in rows] == [None, 2, 1]
    with pytest.raises(OpsError) as e:
        pauses.set_limit(conn, OPS, "type", "test.record", 0, "x")
    assert e.value.code == "invalid_limit"


def test_a_queues_slots_per_worker_are_a_live_limit_bounded_and_audited(conn):
    r = pauses.set_limit(conn, OPS, "queue", "bulk", 7, "reports are piling up")
    assert r["before"] == {"value": None, "live": False} and r["after"] == {"value": 7, "live": True}
    holds = pauses.read_holds(conn)
    assert holds.queue_slots("bulk") == 7 and holds.queue_slots("default") is None
    r = pauses.set_limit(conn, OPS, "queue", "bulk", 3, "too much")
    assert r["before"] == {"value": 7, "live": True}
    for bad in (0, 1001, -1):
        with pytest.raises(OpsError) as e:
            pauses.set_limit(conn, OPS, "queue", "bulk", bad, "x")
        assert e.value.code == "invalid_limit"
    with pytest.raises(OpsError) as e:
        pauses.set_limit(conn, OPS, "queue", "nope", 3, "x")
    assert e.value.code == "not_found"
    pauses.set_limit(conn, OPS, "queue", "bulk", None, "back to the configuration")
    assert pauses.read_holds(conn).queue_slots("bulk") is None
    rows = conn.execute("SELECT before, after FROM audit_log WHERE action = 'limit.set' AND target_type = 'queue' "
                        "ORDER BY at, id").fetchall()
    assert [(x["before"]["value"], x["after"]["value"]) for x in rows] == [(None, 7), (7, 3), (3, None)]


def test_a_tenants_concurrency_limit_caps_its_running_jobs_in_the_claim(conn, make_tenant, t0):
    a, b = make_tenant(conn), make_tenant(conn)
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": f"{t['slug']}{i}"}, t["id"])
                                 for i in range(6) for t in (a, b)])
    r = pauses.set_tenant_limits(conn, OPS, a["slug"], "noisy tenant", max_running=2, rate=5.0, burst=10)
    assert r["before"] == {"rate": None, "burst": None, "max_running": None}
    assert r["after"] == {"rate": 5.0, "burst": 10, "max_running": 2}
    got = claim_all(conn, "default", t0 + timedelta(seconds=1))
    by_tenant = {}
    for row in got:
        by_tenant[row["tenant_id"]] = by_tenant.get(row["tenant_id"], 0) + 1
    assert by_tenant == {a["id"]: 2, b["id"]: 6}
    # Room again once one of its jobs ends; back to no limit with None.
    conn.execute("UPDATE jobs SET status = 'succeeded', locked_by = NULL, locked_until = NULL "
                 "WHERE id = (SELECT id FROM jobs WHERE tenant_id = %s AND status = 'running' LIMIT 1)", (a["id"],))
    assert len(claim_all(conn, "default", t0 + timedelta(seconds=1))) == 1
    r = pauses.set_tenant_limits(conn, OPS, a["slug"], "calm again", max_running=None)
    assert r["before"]["max_running"] == 2 and r["after"] == {"rate": 5.0, "burst": 10, "max_running": None}
    assert len(claim_all(conn, "default", t0 + timedelta(seconds=1))) == 3
    rows = conn.execute("SELECT tenant_id, before, after FROM audit_log WHERE action = 'tenant.limits' "
                        "ORDER BY at, id").fetchall()
    assert [x["before"]["max_running"] for x in rows] == [None, 2] and rows[0]["tenant_id"] == a["id"]


def test_tenant_limits_refuse_bad_values(conn, make_tenant):
    a = make_tenant(conn)
    for kwargs in ({"rate": 0}, {"rate": -1.0}, {"rate": float("inf")}, {"burst": 0}, {"max_running": 0},
                   {"max_running": 100001}, {"burst": 2.5}, {"max_running": True}):
        with pytest.raises(OpsError) as e:
            pauses.set_tenant_limits(conn, OPS, a["slug"], "x", **kwargs)
        assert e.value.code == "invalid_limit", kwargs
    with pytest.raises(OpsError) as e:
        pauses.set_tenant_limits(conn, OPS, "no-such-tenant", "x", max_running=1)
    assert e.value.code == "not_found"
    with pytest.raises(OpsError) as e:
        pauses.set_tenant_limits(conn, OPS, a["slug"], "  ", max_running=1)
    assert e.value.code == "reason_required"


def test_a_tenants_live_rate_binds_its_next_enqueue(conn, make_tenant, t0):
    from opsboard import backpressure
    a = make_tenant(conn)
    admit = lambda: backpressure.admission(conn, a["id"], "default", now=t0).status  # noqa: E731
    assert [admit() for _ in range(3)] == [200, 200, 200]
    pauses.set_tenant_limits(conn, OPS, a["slug"], "flood", rate=0.001, burst=1)
    # The bucket the default filled is clamped to the new burst at once.
    assert [admit() for _ in range(2)] == [200, 429]


def test_only_a_statement_that_changes_a_hold_or_a_limit_wakes_the_workers(db_url):
    """The leader tidies expired holds every second, and the holds page on every view: a DELETE of no
    rows notified every worker all the same (0027), and each fetcher of each queue claimed again."""
    from opsboard.schema import PAUSES_CHANNEL
    from tests.conftest import connect

    with connect(db_url) as c, connect(db_url) as listener:
        listener.execute(f"LISTEN {PAUSES_CHANNEL}")

        def received() -> int:
            c.execute("SELECT pg_notify(%s, 'sentinel')", (PAUSES_CHANNEL,))
            n = 0
            for note in listener.notifies(timeout=10):
                if note.payload == "sentinel":
                    return n
                n += 1
            raise AssertionError("the sentinel notification never arrived")

        ops = audit.Actor(label="ops")
        assert received() == 0
        assert Pauses().run_once(c) == 0 and pauses.list_pauses(c) == []
        c.execute("UPDATE limit_overrides SET value = value WHERE false")
        assert received() == 0
        pauses.pause(c, ops, "type", "test.slow", "failing")
        assert received() == 1
        pauses.set_limit(c, ops, "type", "test.slow", 3, "slow down")
        assert received() == 1
        pauses.resume(c, ops, "type", "test.slow", "fixed")
        assert received() == 1
