"""The queue's contract on a real PostgreSQL: enqueue, claim, fencing, cancel,
schedules, expiry, ordered groups, NOTIFY, outcomes.

Time is passed in (``now=``) instead of waited for.  Most tests run in the
rolled-back ``conn``; the NOTIFY test commits in its own database.
"""
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from opsboard import audit, auth, jobqueue, jobtypes
from opsboard.jobqueue import NewJob, OutcomeRecord, QueueError
from opsboard.schema import JOBS_CHANNEL
from tests.conftest import connect
from worker.services.expiry import Expiry
from worker.services.reaper import Reaper


def rec(k):
    return {"key": k}


def count_jobs(conn) -> int:
    return conn.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]


def job(conn, job_id) -> dict:
    return jobqueue.get_job(conn, job_id)


def outcome(row, kind, *, code=None, delay=0.0, at=None) -> OutcomeRecord:
    return OutcomeRecord(job_id=row["id"], token=row["attempts"], kind=kind, started_at=at or row["started_at"],
                         code=code, delay=delay)


def claim_ids(conn, worker, now, queue_name="default", limit=50, lease=30):
    return [r["id"] for r in jobqueue.claim_batch(conn, queue_name, worker, limit, lease, now=now)]


# ---------------------------------------------------------------- enqueue

def test_enqueue_returns_the_row_with_the_types_policy(conn, tenant):
    row = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], correlation_id="req-1")
    assert row["status"] == "pending" and row["attempts"] == 0
    assert (row["queue"], row["max_attempts"]) == ("default", 3)
    assert row["payload"] == {"key": "a"} and row["correlation_id"] == "req-1"
    crit = jobqueue.enqueue(conn, "test.record", rec("b"), tenant=tenant, version=2, max_attempts=9, priority=-5)
    assert (crit["queue"], crit["version"], crit["max_attempts"], crit["priority"]) == ("critical", 2, 9, -5)


def test_idempotent_enqueue_returns_the_same_job_and_a_dead_job_frees_the_key(conn, tenant, make_tenant, t0):
    first = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], idempotency_key="order-1")
    again = jobqueue.enqueue(conn, "test.record", rec("other"), tenant=tenant["id"], idempotency_key="order-1")
    assert again["id"] == first["id"] and again["payload"] == {"key": "a"}
    assert count_jobs(conn) == 1
    # The key is per (tenant, type).
    other_tenant = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=make_tenant(conn)["id"], idempotency_key="order-1")
    other_type = jobqueue.enqueue(conn, "test.slow", {"key": "a", "ms": 1}, tenant=tenant["id"], idempotency_key="order-1")
    assert len({first["id"], other_tenant["id"], other_type["id"]}) == 3

    # Still held while running, retryable or succeeded...
    [claimed] = jobqueue.claim_batch(conn, "default", "w1", 1, 30, now=t0)
    assert claimed["id"] == first["id"]
    assert jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], idempotency_key="order-1")["id"] == first["id"]
    # ...freed once the job is dead.
    assert jobqueue.record_outcomes(conn, "w1", [outcome(claimed, "dead", code="http_410")], now=t0) == {first["id"]}
    fresh = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], idempotency_key="order-1")
    assert fresh["id"] != first["id"] and fresh["status"] == "pending"
    assert job(conn, first["id"])["status"] == "dead"


@pytest.mark.parametrize("bad", [
    dict(type="test.nope", payload={"key": "a"}),
    dict(type="test.record", payload={"key": "a"}, version=7),
    dict(type="test.record", payload={}),
    dict(type="test.record", payload={"key": 5}),
    dict(type="test.record", payload={"key": "a", "extra": 1}),
    dict(type="test.record", payload={"key": "a\x00"}),
    dict(type="test.record", payload={"key": "a"}, queue="urgent"),
    dict(type="test.record", payload={"key": "a"}, idempotency_key=""),
    dict(type="test.record", payload={"key": "a"}, group_key="g" * 201),
    dict(type="test.record", payload={"key": "a"}, priority=40000),
    dict(type="test.record", payload={"key": "a"}, max_attempts=-1),
    dict(type="test.record", payload={"key": "a"}, run_at=datetime(2030, 1, 1)),
    dict(type="test.record", payload={"key": "a"}, expires_at=datetime(2030, 1, 1)),
])
def test_enqueue_refuses_before_writing_anything(conn, tenant, bad, t0):
    bad = dict(bad)
    with pytest.raises(jobtypes.JobTypeError):
        jobqueue.enqueue(conn, bad.pop("type"), bad.pop("payload"), tenant=tenant["id"], **bad)
    assert count_jobs(conn) == 0
    # The transaction is still usable: nothing reached the database.
    jobqueue.enqueue(conn, "test.record", rec("ok"), tenant=tenant["id"])
    assert count_jobs(conn) == 1


def test_expires_before_run_at_is_refused(conn, tenant, t0):
    with pytest.raises(jobtypes.InvalidPayload):
        jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], run_at=t0 + timedelta(minutes=5),
                      expires_at=t0 + timedelta(minutes=1))
    assert count_jobs(conn) == 0


def test_enqueue_many_returns_ids_in_order_and_is_idempotent_per_member(conn, tenant):
    held = jobqueue.enqueue(conn, "test.record", rec("held"), tenant=tenant["id"], idempotency_key="k-held")
    jobs = [NewJob("test.record", rec(f"j{i}"), tenant["id"]) for i in range(5)]
    jobs.insert(2, NewJob("test.record", rec("dup"), tenant["id"], idempotency_key="k-held"))
    jobs.append(NewJob("test.record", rec("new"), tenant["id"], idempotency_key="k-new"))
    jobs.append(NewJob("test.record", rec("new-again"), tenant["id"], idempotency_key="k-new"))
    ids = jobqueue.enqueue_many(conn, jobs)
    assert len(ids) == len(jobs)
    assert ids[2] == held["id"]
    assert ids[-1] == ids[-2]
    assert len(set(ids)) == len(jobs) - 1
    # Order: each id is the job built from the NewJob at the same position.
    for new_job, job_id in zip(jobs, ids):
        if new_job.idempotency_key is None:
            assert job(conn, job_id)["payload"] == new_job.payload
    assert job(conn, ids[-1])["payload"] == {"key": "new"}
    assert count_jobs(conn) == 1 + 5 + 1
    # Again: the same ids for the keyed members, new ones for the others.
    again = jobqueue.enqueue_many(conn, jobs)
    assert again[2] == held["id"] and again[-1] == ids[-1]
    assert jobqueue.enqueue_many(conn, []) == []


def test_enqueue_many_with_one_invalid_member_writes_nothing(conn, tenant):
    jobs = [NewJob("test.record", rec("a"), tenant["id"]), NewJob("test.record", {"nope": 1}, tenant["id"])]
    with pytest.raises(jobtypes.InvalidPayload):
        jobqueue.enqueue_many(conn, jobs)
    with pytest.raises(jobtypes.InvalidPayload):
        jobqueue.enqueue_many(conn, [jobs[0], NewJob("test.record", rec("b"), tenant["id"], priority=-40000)])
    with pytest.raises(jobtypes.InvalidPayload):
        jobqueue.enqueue_many(conn, [jobs[0], NewJob("test.record", rec("b"), tenant["id"], run_at=datetime(2030, 1, 1))])
    with pytest.raises(jobtypes.UnknownJobType):
        jobqueue.enqueue_many(conn, [jobs[0], NewJob("test.unknown", {}, tenant["id"])])
    assert count_jobs(conn) == 0


def test_one_notification_per_transaction_and_queue(db_url):
    with connect(db_url) as producer, connect(db_url) as listener:
        tenant = auth.ensure_tenant(producer, "acme")
        listener.execute(f"LISTEN {JOBS_CHANNEL}")

        def received():
            # A sentinel sent after the commit arrives after everything the commit sent.
            producer.execute("SELECT pg_notify(%s, 'sentinel')", (JOBS_CHANNEL,))
            got = []
            for n in listener.notifies(timeout=10):
                if n.payload == "sentinel":
                    return got
                got.append(n.payload)
            raise AssertionError("the sentinel notification never arrived")

        with producer.transaction():
            jobqueue.enqueue_many(producer, [NewJob("test.record", rec(f"m{i}"), tenant["id"]) for i in range(100)])
            for i in range(3):
                jobqueue.enqueue(producer, "test.record", rec(f"s{i}"), tenant=tenant["id"])
            jobqueue.enqueue_many(producer, [NewJob("test.record", rec(f"c{i}"), tenant["id"], version=2)
                                          for i in range(10)])
            jobqueue.enqueue(producer, "test.record", rec("c"), tenant=tenant["id"], version=2)
        assert sorted(received()) == ["critical", "default"]

        # A transaction that only hits an idempotency key inserts nothing and says nothing.
        with producer.transaction():
            jobqueue.enqueue(producer, "test.record", rec("k"), tenant=tenant["id"], idempotency_key="k")
        assert received() == ["default"]
        with producer.transaction():
            jobqueue.enqueue(producer, "test.record", rec("k"), tenant=tenant["id"], idempotency_key="k")
        assert received() == []
        # Autocommit: one per statement.
        jobqueue.enqueue(producer, "test.record", rec("x"), tenant=tenant["id"])
        jobqueue.enqueue(producer, "test.record", rec("y"), tenant=tenant["id"])
        assert received() == ["default", "default"]


# ---------------------------------------------------------------- claim and outcomes

def test_claim_marks_running_with_a_lease_and_counts_the_attempt(conn, tenant, t0):
    j = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    [row] = jobqueue.claim_batch(conn, "default", "w1", 10, 5, now=t0)
    assert row["id"] == j["id"] and row["attempts"] == 1 and row["payload"] == {"key": "a"}
    current = job(conn, j["id"])
    assert current["status"] == "running" and current["locked_by"] == "w1"
    assert current["locked_until"] == t0 + timedelta(seconds=5)
    assert jobqueue.claim_batch(conn, "default", "w2", 10, 5, now=t0) == []
    assert jobqueue.claim_batch(conn, "critical", "w2", 10, 5, now=t0) == []
    assert jobqueue.claim_batch(conn, "default", "w2", 0, 5, now=t0) == []


def test_claim_respects_limit_priority_and_age(conn, tenant, t0):
    low = jobqueue.enqueue(conn, "test.record", rec("low"), tenant=tenant["id"], priority=200)
    old = jobqueue.enqueue(conn, "test.record", rec("old"), tenant=tenant["id"])
    new = jobqueue.enqueue(conn, "test.record", rec("new"), tenant=tenant["id"])
    high = jobqueue.enqueue(conn, "test.record", rec("high"), tenant=tenant["id"], priority=1)
    assert set(claim_ids(conn, "w", t0, limit=2)) == {high["id"], old["id"]}
    assert set(claim_ids(conn, "w", t0, limit=5)) == {new["id"], low["id"]}


def test_outcomes_succeeded_retryable_dead_snoozed_released(conn, tenant, t0):
    ids = [jobqueue.enqueue(conn, "test.record", rec(k), tenant=tenant["id"])["id"]
           for k in ("ok", "retry", "dead", "snooze", "release")]
    rows = {r["id"]: r for r in jobqueue.claim_batch(conn, "default", "w1", 10, 30, now=t0)}
    later = t0 + timedelta(seconds=1)
    kinds = ["succeeded", "retryable", "dead", "snoozed", "released"]
    records = [outcome(rows[i], k, code=None if k == "succeeded" else f"c_{k}", delay=60) for i, k in zip(ids, kinds)]
    assert jobqueue.record_outcomes(conn, "w1", records, now=later) == set(ids)
    ok, retry_, dead, snooze, release = (job(conn, i) for i in ids)
    assert (ok["status"], ok["attempts"], ok["finished_at"], ok["locked_by"]) == ("succeeded", 1, later, None)
    assert (retry_["status"], retry_["attempts"], retry_["last_error_code"]) == ("retryable", 1, "c_retryable")
    assert retry_["available_at"] == later + timedelta(seconds=60)
    assert (dead["status"], dead["last_error_code"], dead["finished_at"]) == ("dead", "c_dead", later)
    # Snooze and release give the attempt back.
    assert (snooze["status"], snooze["attempts"], snooze["available_at"]) == ("pending", 0, later + timedelta(seconds=60))
    assert (release["status"], release["attempts"], release["last_error_code"]) == ("pending", 0, None)
    for i, k in zip(ids, kinds):
        [a] = jobqueue.attempts(conn, i)
        assert (a["outcome"], a["attempt"], a["worker"], a["finished_at"]) == (k, 1, "w1", later)
    # Recording again applies nothing: the jobs are no longer running under this token.
    assert jobqueue.record_outcomes(conn, "w1", records, now=later) == set()
    assert jobqueue.record_outcomes(conn, "w1", []) == set()


def test_a_duplicated_outcome_in_one_batch_is_written_once(conn, tenant, t0):
    # A timeout and the handler's own late result can reach one batch together.
    j = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    [row] = jobqueue.claim_batch(conn, "default", "w1", 1, 30, now=t0)
    applied = jobqueue.record_outcomes(conn, "w1", [outcome(row, "retryable", code="timeout"),
                                                 outcome(row, "succeeded")], now=t0)
    assert applied == {j["id"]}
    assert len(jobqueue.attempts(conn, j["id"])) == 1
    assert jobqueue.attempts(conn, j["id"])[0]["outcome"] == job(conn, j["id"])["status"] == "retryable"


def test_fencing_a_reclaimed_job_ignores_the_old_worker(conn, tenant, t0):
    j = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    [a_row] = jobqueue.claim_batch(conn, "default", "worker-a", 10, lease_seconds=5, now=t0)
    assert jobqueue.heartbeat(conn, "worker-a", [(j["id"], a_row["attempts"])], 5, now=t0 + timedelta(seconds=2)) \
        == {j["id"]}
    # Worker A stalls past its (extended) lease; the reaper recovers the job.
    t1 = t0 + timedelta(seconds=10)
    assert Reaper().run_once(conn, now=t1) == 1
    assert job(conn, j["id"])["status"] == "retryable"
    # (the reaper backs a recovered job off by 1-2 s after its first attempt)
    t1 = t1 + timedelta(seconds=3)
    [b_row] = jobqueue.claim_batch(conn, "default", "worker-b", 10, lease_seconds=5, now=t1)
    assert b_row["id"] == j["id"] and b_row["attempts"] == 2

    # A wakes up: its heartbeat and its outcome change nothing.
    assert jobqueue.heartbeat(conn, "worker-a", [(j["id"], a_row["attempts"])], 5, now=t1) == set()
    assert jobqueue.record_outcomes(conn, "worker-a", [outcome(a_row, "succeeded")], now=t1) == set()
    # Not even with B's token: the worker must match too.
    assert jobqueue.record_outcomes(conn, "worker-a", [outcome(b_row, "succeeded")], now=t1) == set()
    current = job(conn, j["id"])
    assert (current["status"], current["locked_by"], current["attempts"]) == ("running", "worker-b", 2)
    assert current["locked_until"] == t1 + timedelta(seconds=5)

    assert jobqueue.heartbeat(conn, "worker-b", [(j["id"], b_row["attempts"])], 5, now=t1) == {j["id"]}
    assert jobqueue.record_outcomes(conn, "worker-b", [outcome(b_row, "succeeded")], now=t1) == {j["id"]}
    assert job(conn, j["id"])["status"] == "succeeded"
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in jobqueue.attempts(conn, j["id"])] == \
        [(1, "worker-a", "lease_expired"), (2, "worker-b", "succeeded")]


def test_fencing_the_same_worker_reclaiming_uses_the_attempt_as_token(conn, tenant, t0):
    j = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    [first] = jobqueue.claim_batch(conn, "default", "w", 10, 5, now=t0)
    t1 = t0 + timedelta(seconds=10)
    Reaper().run_once(conn, now=t1)
    [second] = jobqueue.claim_batch(conn, "default", "w", 10, 5, now=t1 + timedelta(seconds=3))
    assert jobqueue.record_outcomes(conn, "w", [outcome(first, "dead", code="x")], now=t1) == set()
    assert jobqueue.record_outcomes(conn, "w", [outcome(second, "succeeded")], now=t1) == {j["id"]}


def test_the_reaper_leaves_live_leases_alone_and_kills_the_last_attempt(conn, tenant, t0):
    live = jobqueue.enqueue(conn, "test.record", rec("live"), tenant=tenant["id"])
    last = jobqueue.enqueue(conn, "test.record", rec("last"), tenant=tenant["id"], max_attempts=1)
    jobqueue.claim_batch(conn, "default", "w", 10, 30, now=t0)
    assert Reaper().run_once(conn, now=t0 + timedelta(seconds=29)) == 0
    conn.execute("UPDATE jobs SET locked_until = %s WHERE id = %s", (t0 + timedelta(seconds=60), live["id"]))
    assert Reaper().run_once(conn, now=t0 + timedelta(seconds=31)) == 1
    assert job(conn, live["id"])["status"] == "running"
    dead = job(conn, last["id"])
    assert (dead["status"], dead["last_error_code"], dead["locked_by"]) == ("dead", "lease_expired", None)
    [a] = jobqueue.attempts(conn, last["id"])
    assert (a["outcome"], a["error_code"], a["worker"]) == ("lease_expired", "lease_expired", "w")


# ---------------------------------------------------------------- cancel

def test_cancel_pending_and_retryable_but_not_running_or_finished(conn, tenant, t0):
    pending = jobqueue.enqueue(conn, "test.record", rec("p"), tenant=tenant["id"])
    assert jobqueue.cancel(conn, pending["id"])["status"] == "cancelled"
    assert claim_ids(conn, "w", t0) == []

    running = jobqueue.enqueue(conn, "test.record", rec("r"), tenant=tenant["id"])
    [row] = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    with pytest.raises(QueueError) as e:
        jobqueue.cancel(conn, running["id"])
    assert e.value.code == "invalid_status"
    assert job(conn, running["id"])["status"] == "running"

    jobqueue.record_outcomes(conn, "w", [outcome(row, "retryable", code="http_503")], now=t0)
    actor = audit.Actor(label="ops@example.test")
    cancelled = jobqueue.cancel(conn, running["id"], actor=actor, reason="customer asked", request_key="rk-1")
    assert cancelled["status"] == "cancelled"
    rec_ = audit.find_by_request_key(conn, "job.cancel", "rk-1")
    assert rec_["before"] == {"status": "retryable"} and rec_["after"] == {"status": "cancelled"}
    assert rec_["reason"] == "customer asked" and rec_["target_id"] == str(running["id"])
    # The same request again is harmless.
    assert jobqueue.cancel(conn, running["id"], actor=actor, reason="customer asked", request_key="rk-1")["id"] == \
        running["id"]

    done = jobqueue.enqueue(conn, "test.record", rec("d"), tenant=tenant["id"])
    [row] = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    jobqueue.record_outcomes(conn, "w", [outcome(row, "succeeded")], now=t0)
    for job_id in (done["id"], pending["id"]):
        with pytest.raises(QueueError) as e:
            jobqueue.cancel(conn, job_id)
        assert e.value.code == "invalid_status"
    with pytest.raises(QueueError) as e:
        jobqueue.cancel(conn, "00000000-0000-0000-0000-000000000000")
    assert e.value.code == "not_found"


def test_cancel_is_scoped_to_tenants(conn, tenant, make_tenant):
    j = jobqueue.enqueue(conn, "test.record", rec("p"), tenant=tenant["id"])
    other = auth.TenantScope(all=False, ids=(make_tenant(conn)["id"],))
    with pytest.raises(QueueError) as e:
        jobqueue.cancel(conn, j["id"], scope=other)
    assert e.value.code == "not_found"
    assert job(conn, j["id"])["status"] == "pending"


# ---------------------------------------------------------------- schedules and expiry

def test_a_scheduled_job_is_claimable_only_from_run_at(conn, tenant, t0):
    j = jobqueue.enqueue(conn, "test.record", rec("later"), tenant=tenant["id"], run_at=t0 + timedelta(minutes=10))
    assert claim_ids(conn, "w", t0) == []
    assert claim_ids(conn, "w", t0 + timedelta(minutes=9, seconds=59)) == []
    assert claim_ids(conn, "w", t0 + timedelta(minutes=10)) == [j["id"]]


def test_expired_jobs_are_not_claimed_and_the_expiry_service_kills_them(conn, tenant, t0):
    otp = jobqueue.enqueue(conn, "test.record", rec("otp"), tenant=tenant["id"], expires_at=t0 + timedelta(seconds=30))
    keep = jobqueue.enqueue(conn, "test.record", rec("keep"), tenant=tenant["id"], run_at=t0 + timedelta(hours=1))
    running = jobqueue.enqueue(conn, "test.record", rec("running"), tenant=tenant["id"], priority=0,
                            expires_at=t0 + timedelta(seconds=30))
    assert claim_ids(conn, "w", t0, limit=1) == [running["id"]]
    late = t0 + timedelta(seconds=31)
    assert claim_ids(conn, "w", late) == []
    assert Expiry().run_once(conn, now=t0 + timedelta(seconds=29)) == 0
    assert Expiry().run_once(conn, now=late) == 1
    dead = job(conn, otp["id"])
    assert (dead["status"], dead["last_error_code"], dead["finished_at"]) == ("dead", "expired", late)
    # A job already running finishes its attempt; one without expiry is untouched.
    assert job(conn, running["id"])["status"] == "running"
    assert job(conn, keep["id"])["status"] == "pending"
    assert Expiry().run_once(conn, now=late) == 0


# ---------------------------------------------------------------- ordered groups

def test_a_group_runs_one_job_at_a_time_in_creation_order(conn, tenant, make_tenant, t0):
    g = [jobqueue.enqueue(conn, "test.record", rec(f"g{i}"), tenant=tenant["id"], group_key="order-7")["id"]
         for i in range(4)]
    # A later job with a better priority still waits for its group's older jobs.
    g.append(jobqueue.enqueue(conn, "test.record", rec("g4"), tenant=tenant["id"], group_key="order-7", priority=0)["id"])
    free = jobqueue.enqueue(conn, "test.record", rec("free"), tenant=tenant["id"])["id"]
    elsewhere = jobqueue.enqueue(conn, "test.record", rec("t2"), tenant=make_tenant(conn)["id"], group_key="order-7")["id"]

    first = jobqueue.claim_batch(conn, "default", "w", 50, 30, now=t0)
    assert {r["id"] for r in first} == {g[0], free, elsewhere}
    assert claim_ids(conn, "w2", t0) == []  # even across claims: g0 is running

    by_id = {r["id"]: r for r in first}
    jobqueue.record_outcomes(conn, "w", [outcome(by_id[g[0]], "succeeded")], now=t0)
    [second] = jobqueue.claim_batch(conn, "default", "w", 50, 30, now=t0)
    assert second["id"] == g[1]
    # A retry keeps its place: the group waits for it.
    jobqueue.record_outcomes(conn, "w", [outcome(second, "retryable", code="x", delay=60)], now=t0)
    assert claim_ids(conn, "w", t0) == []
    [again] = jobqueue.claim_batch(conn, "default", "w", 50, 30, now=t0 + timedelta(seconds=61))
    assert again["id"] == g[1]
    # A dead job does not block the rest of its group.
    jobqueue.record_outcomes(conn, "w", [outcome(again, "dead", code="http_410")], now=t0)
    assert claim_ids(conn, "w", t0 + timedelta(seconds=61)) == [g[2]]
    # Neither does a cancelled one.
    jobqueue.cancel(conn, g[3])
    jobqueue.record_outcomes(conn, "w", [outcome(job(conn, g[2]), "succeeded")], now=t0)
    assert claim_ids(conn, "w", t0 + timedelta(seconds=61)) == [g[4]]


def test_a_group_spans_queues_and_types(conn, tenant, t0):
    a = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"], group_key="acct-1")
    b = jobqueue.enqueue(conn, "test.record", rec("b"), tenant=tenant["id"], group_key="acct-1", version=2)
    assert claim_ids(conn, "w", t0, queue_name="critical") == []
    assert claim_ids(conn, "w", t0) == [a["id"]]
    jobqueue.record_outcomes(conn, "w", [outcome(job(conn, a["id"]), "succeeded")], now=t0)
    assert claim_ids(conn, "w", t0, queue_name="critical") == [b["id"]]


# ---------------------------------------------------------------- dead is final

def test_a_dead_job_cannot_be_updated(conn, tenant, t0):
    j = jobqueue.enqueue(conn, "test.record", rec("a"), tenant=tenant["id"])
    [row] = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    jobqueue.record_outcomes(conn, "w", [outcome(row, "dead", code="http_410")], now=t0)
    for sql in ("UPDATE jobs SET status = 'pending' WHERE id = %s",
                "UPDATE jobs SET payload = '{}' WHERE id = %s",
                "UPDATE jobs SET last_error_code = 'edited' WHERE id = %s"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with conn.transaction():
                conn.execute(sql, (j["id"],))
    with pytest.raises(QueueError):
        jobqueue.cancel(conn, j["id"])
    # Services pass it by.
    assert Reaper().run_once(conn, now=t0 + timedelta(days=1)) == 0
    assert Expiry().run_once(conn, now=t0 + timedelta(days=1)) == 0
    assert job(conn, j["id"])["last_error_code"] == "http_410"


def test_a_claim_whose_cursor_is_past_the_last_tenant_wraps_around(conn, make_tenant, t0):
    # One free slot (limit 1) is the steady state of a busy worker: the cursor
    # then points at the only (or last) tenant with work, and the next claim
    # must not come back empty and leave the slot idle for a poll interval.
    tenants = [make_tenant(conn)["id"] for _ in range(2)]
    for t in tenants:
        for i in range(3):
            jobqueue.enqueue(conn, "test.record", rec(f"{t}-{i}"), tenant=t)
    cursor, got = jobqueue.ZERO_TENANT, []
    for _ in range(6):
        c = jobqueue.claim(conn, "default", "w", 1, 30, after_tenant=cursor, now=t0)
        assert len(c.rows) == 1, f"an empty claim after {len(got)} jobs"
        got.append(c.rows[0]["tenant_id"])
        cursor = c.next_after_tenant
    # Round-robin still: the tenants alternate.
    assert got[0::2] == [got[0]] * 3 and got[1::2] == [got[1]] * 3 and got[0] != got[1]
    assert jobqueue.claim(conn, "default", "w", 1, 30, after_tenant=cursor, now=t0).rows == []


def test_a_claim_tells_jobs_other_claims_hold_from_no_jobs_due(db_url):
    """contended: due jobs all locked by another claim (claim again soon), not "nothing due" (wait
    for a notification): see worker.fetcher."""
    from opsboard import pauses
    with connect(db_url) as c, connect(db_url) as holder:
        t = auth.ensure_tenant(c, "acme")["id"]
        assert jobqueue.claim(c, "default", "w", 10, 30) == jobqueue.Claim([], jobqueue.ZERO_TENANT, contended=False)
        jobqueue.enqueue_many(c, [NewJob("test.record", rec(f"k{i}"), t) for i in range(3)])
        with holder.transaction():
            holder.execute("SELECT id FROM jobs FOR UPDATE")
            got = jobqueue.claim(c, "default", "w", 10, 30, after_tenant=uuid.UUID(int=1))
            assert got.rows == [] and got.contended
        got = jobqueue.claim(c, "default", "w", 10, 30)
        assert len(got.rows) == 3 and not got.contended
        again = jobqueue.claim(c, "default", "w", 10, 30)
        assert again.rows == [] and not again.contended
        # Held jobs are not candidates: nothing to claim again for.
        pauses.pause(c, audit.Actor(label="ops"), "type", "test.slow", "failing")
        jobqueue.enqueue(c, "test.slow", {"key": "h", "ms": 1}, tenant=t)
        held = jobqueue.claim(c, "default", "w", 10, 30)
        assert held.rows == [] and not held.contended
