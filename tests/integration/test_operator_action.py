"""The one helper for audited, idempotent operator actions (opsboard.audit.operator_action)."""
import threading

import pytest

from opsboard import audit, auth, jobqueue
from opsboard.errors import OpsError
from tests.conftest import connect, wait_for

OPS = audit.Actor("ops@example.test")


def _enqueue_action(conn, tenant_id, target, request_key, calls, *, reason="because"):
    """A sample action: enqueue a job (the change) and audit it (after names the job)."""
    def perform(ctx):
        calls.append(target)
        job = jobqueue.enqueue(conn, "diag.noop", {}, tenant=tenant_id)
        ctx.write(tenant_id=tenant_id, after={"job_id": str(job["id"])})
        return job

    return audit.operator_action(
        conn, OPS, "test.enqueue", target_type="thing", target_id=target, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: jobqueue.get_job(conn, previous["after"]["job_id"]))


def _count(conn, sql):
    return conn.execute(sql).fetchone()["n"]


def test_a_repeated_key_returns_the_first_result_without_acting_again(conn, tenant):
    calls = []
    first = _enqueue_action(conn, tenant["id"], "t-1", "rk", calls)
    again = _enqueue_action(conn, tenant["id"], "t-1", "rk", calls)
    assert again["id"] == first["id"]
    assert calls == ["t-1"]
    assert _count(conn, "SELECT count(*) AS n FROM audit_log WHERE action = 'test.enqueue'") == 1
    rec = audit.find_by_request_key(conn, "test.enqueue", "rk")
    assert (rec["target_type"], rec["target_id"], rec["reason"], rec["actor_label"]) == \
        ("thing", "t-1", "because", "ops@example.test")


def test_a_key_used_for_another_target_is_refused(conn, tenant):
    calls = []
    _enqueue_action(conn, tenant["id"], "t-1", "rk", calls)
    with pytest.raises(OpsError) as e:
        _enqueue_action(conn, tenant["id"], "t-2", "rk", calls)
    assert e.value.code == "request_key_reused" and e.value.status == 409
    assert calls == ["t-1"]


@pytest.mark.parametrize("reason", ["", "  ", None])
def test_a_reason_is_required_before_anything_happens(conn, tenant, reason):
    calls = []
    with pytest.raises(OpsError) as e:
        _enqueue_action(conn, tenant["id"], "t-1", "rk", calls, reason=reason)
    assert e.value.code == "reason_required" and e.value.status == 400
    assert calls == []


def test_a_refusal_after_the_audit_row_leaves_neither_change_nor_record(conn, tenant):
    def perform(ctx):
        jobqueue.enqueue(conn, "diag.noop", {}, tenant=tenant["id"])
        ctx.write(tenant_id=tenant["id"])
        raise OpsError("no, after all", "invalid_status")

    before = _count(conn, "SELECT count(*) AS n FROM jobs")
    with pytest.raises(OpsError) as e:
        audit.operator_action(conn, OPS, "test.refuse", target_type="thing", target_id="t", reason="r",
                              request_key="rk", perform=perform, repeat=lambda p: p)
    assert e.value.code == "invalid_status"
    assert _count(conn, "SELECT count(*) AS n FROM jobs") == before
    assert audit.find_by_request_key(conn, "test.refuse", "rk") is None


def test_the_loser_of_a_race_undoes_its_change_and_answers_with_the_winners_result(db_url):
    with connect(db_url) as c:
        tenant_id = auth.ensure_tenant(c, "acme")["id"]
    with connect(db_url) as first, connect(db_url) as second:
        pid = second.info.backend_pid
        with first.transaction():
            won = _enqueue_action(first, tenant_id, "t-1", "same-click", [])
            results = []
            loser = threading.Thread(target=lambda: results.append(
                _enqueue_action(second, tenant_id, "t-1", "same-click", [])))
            loser.start()
            # The second request has made its job and now waits on the audit row's unique key.
            with connect(db_url) as watch:
                wait_for(lambda: watch.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                               (pid,)).fetchone()["wait_event_type"] == "Lock",
                         timeout=10, message="the second request to wait on the first one's key")
        loser.join(10)
        assert [r["id"] for r in results] == [won["id"]]
        assert _count(first, "SELECT count(*) AS n FROM jobs") == 1
        assert _count(first, "SELECT count(*) AS n FROM audit_log WHERE action = 'test.enqueue'") == 1


def test_error_codes_map_to_http_statuses():
    assert OpsError("x", "not_found").status == 404
    assert OpsError("x", "invalid_status").status == 409
    assert OpsError("x", "reason_required").status == 400
    assert OpsError("x", "some_new_code").status == 400
    assert OpsError("x", "locked", status=423).status == 423
    assert jobqueue.QueueError is OpsError
