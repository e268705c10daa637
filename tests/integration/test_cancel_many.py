"""Bulk cancel (issue 28): every pending or retryable job matching a filter, one audited
action; the preview count, the audit row's ids and every job's state agree."""
from __future__ import annotations

import pytest

from opsboard import audit, jobqueue
from opsboard.auth import TenantScope
from opsboard.errors import OpsError
from opsboard.jobqueue import CancelFilter, NewJob

OPS = audit.Actor(label="ops@example.test")


def test_cancel_many_takes_exactly_the_unstarted_matching_jobs(conn, make_tenant, t0):
    a, b = make_tenant(conn), make_tenant(conn)
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, t["id"]) for i in range(5) for t in (a, b)])
    jobqueue.enqueue_many(conn, [NewJob("test.slow", {"key": "s", "ms": 1}, a["id"])])
    running = jobqueue.claim_batch(conn, "default", "w", 2, 30, now=t0)   # started: never cancelled
    f = CancelFilter(type="test.record", tenant_id=a["id"])
    preview = jobqueue.count_cancellable(conn, f)
    result = jobqueue.cancel_many(conn, f, OPS, "bad import", "key-1", now=t0)
    ids = {r["id"] for r in result.cancelled}
    assert len(ids) == preview and result.remaining == 0
    rows = conn.execute("SELECT id, status, tenant_id, type FROM jobs").fetchall()
    assert {r["id"] for r in rows if r["status"] == "cancelled"} == ids
    assert all(r["tenant_id"] == a["id"] and r["type"] == "test.record" for r in rows if r["id"] in ids)
    assert {r["id"] for r in rows if r["status"] == "running"} == {r["id"] for r in running}
    [row] = conn.execute("SELECT * FROM audit_log WHERE action = 'job.cancel_many'").fetchall()
    assert {str(i) for i in ids} == set(row["after"]["ids"]) and row["after"]["cancelled"] == len(ids)
    assert row["reason"] == "bad import" and row["tenant_id"] == a["id"]
    # A double submit answers with the same jobs and cancels nothing more.
    again = jobqueue.cancel_many(conn, CancelFilter(type="test.record", tenant_id=a["id"]), OPS, "bad import", "key-1")
    assert {r["id"] for r in again.cancelled} == ids
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.cancel_many'").fetchone()["n"] == 1


def test_cancel_many_keeps_to_the_scope_and_the_limit_and_needs_a_reason(conn, make_tenant):
    a, b = make_tenant(conn), make_tenant(conn)
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, t["id"]) for i in range(5) for t in (a, b)])
    scope = TenantScope(all=False, ids=(b["id"],))
    assert jobqueue.count_cancellable(conn, CancelFilter(), scope=scope) == 5
    r = jobqueue.cancel_many(conn, CancelFilter(), OPS, "x", None, scope=scope, limit=3)
    assert len(r.cancelled) == 3 and r.remaining == 2
    assert {c["tenant_id"] for c in r.cancelled} == {b["id"]}
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status = 'pending'",
                        (a["id"],)).fetchone()["n"] == 5
    with pytest.raises(OpsError) as e:
        jobqueue.cancel_many(conn, CancelFilter(), OPS, " ", None)
    assert e.value.code == "reason_required"
