"""The effect ledger: started before the provider call, confirmed with the job's success."""
from __future__ import annotations

from opsboard import auth, jobqueue
from opsboard.jobqueue import OutcomeRecord, QueueError
from tests.conftest import connect, wait_for

import pytest


def _claim(conn, job_id, worker="w"):
    return next(r for r in jobqueue.claim_batch(conn, "default", worker, 100, 30) if r["id"] == job_id)


def test_confirmed_only_by_success_in_the_same_statement(conn, tenant):
    j = jobqueue.enqueue(conn, "test.record", {"key": "a"}, tenant=tenant["id"], idempotency_key="order-1")
    row = _claim(conn, j["id"])
    eff = jobqueue.begin_effect(conn, "k1", j, "smtp")
    assert eff["created"] and eff["state"] == "started"
    jobqueue.set_effect_ref(conn, "k1", j, "msg-42")
    # A retryable outcome leaves the effect started: the next attempt must reconcile.
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(j["id"], row["attempts"], "retryable", row["started_at"],
                                                    code="timeout", has_effects=True)])
    again = jobqueue.begin_effect(conn, "k1", j, "smtp")
    assert not again["created"] and again["state"] == "started" and again["provider_ref"] == "msg-42"
    conn.execute("UPDATE jobs SET available_at = now() - interval '1 second' WHERE id = %s", (j["id"],))
    row = _claim(conn, j["id"])
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(j["id"], row["attempts"], "succeeded", row["started_at"],
                                                    has_effects=True)])
    done = jobqueue.begin_effect(conn, "k1", j, "smtp")
    assert done["state"] == "confirmed" and done["confirmed_at"] is not None and not done["created"]


def test_a_replay_adopts_the_dead_jobs_started_effect(conn, tenant):
    j = jobqueue.enqueue(conn, "test.record", {"key": "a"}, tenant=tenant["id"], idempotency_key="order-2")
    row = _claim(conn, j["id"])
    jobqueue.begin_effect(conn, "k2", j, "smtp")
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(j["id"], row["attempts"], "dead", row["started_at"],
                                                    code="provider_timeout", has_effects=True)])
    from opsboard import audit
    new = jobqueue.replay(conn, j["id"], audit.Actor("ops@example.test"), "provider is back", "rk-1")
    adopted = jobqueue.begin_effect(conn, "k2", new, "smtp")
    assert adopted["job_id"] == new["id"] and adopted["state"] == "started"
    row = _claim(conn, new["id"])
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(new["id"], row["attempts"], "succeeded", row["started_at"],
                                                    has_effects=True)])
    assert jobqueue.begin_effect(conn, "k2", new, "smtp")["state"] == "confirmed"


def test_an_effect_key_is_never_shared_across_tenants(conn, tenant, make_tenant):
    other = make_tenant(conn)
    j = jobqueue.enqueue(conn, "test.record", {"key": "a"}, tenant=tenant["id"])
    k = jobqueue.enqueue(conn, "test.record", {"key": "b"}, tenant=other["id"])
    jobqueue.begin_effect(conn, "shared-key", j, "smtp")
    with pytest.raises(QueueError) as e:
        jobqueue.begin_effect(conn, "shared-key", k, "smtp")
    assert e.value.code == "effect_key_conflict"


def test_worker_sends_once_across_an_ambiguous_timeout(db_url, start_worker):
    with connect(db_url) as c:
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
                  "at timestamptz DEFAULT clock_timestamp())")
        t = auth.ensure_tenant(c, "acme")["id"]
        j = jobqueue.enqueue(c, "test.effect", {"key": "invoice-9"}, tenant=t, idempotency_key="invoice-9")
    start_worker(db_url, "--queues", "default=2")
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT status FROM jobs WHERE id = %s", (j["id"],)).fetchone()["status"]
                 == "succeeded", message="the effect job to succeed")
        assert c.execute("SELECT count(*) AS n FROM test_effects").fetchone()["n"] == 1   # sent once
        eff = c.execute("SELECT state, provider_ref FROM effects").fetchone()
        assert eff == {"state": "confirmed", "provider_ref": "msg-1"}
        assert c.execute("SELECT attempts FROM jobs WHERE id = %s", (j["id"],)).fetchone()["attempts"] == 2
