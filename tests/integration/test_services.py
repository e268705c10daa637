"""Maintenance services called through run_once with an explicit ``now``."""
import time
import uuid
from datetime import timedelta

import psycopg
import pytest

from opsboard import jobqueue
from opsboard.jobqueue import OutcomeRecord
from worker.leader import LeaderLock
from worker.services.expiry import Expiry, ExpiryConfig
from opsboard.schema import uuid7_floor
from worker.services.pace import Pace
from worker.services.pruner import Pruner, PrunerConfig
from worker.services.reaper import Reaper, ReaperConfig


def enqueue(conn, tenant, n, **kw):
    return [jobqueue.enqueue(conn, "test.record", {"key": f"k{i}"}, tenant=tenant["id"], **kw)["id"] for i in range(n)]


def finish(conn, rows, kind, now, code=None):
    return jobqueue.record_outcomes(conn, "w", [OutcomeRecord(r["id"], r["attempts"], kind, now, code=code)
                                             for r in rows], now=now)


def statuses(conn, ids) -> dict:
    rows = conn.execute("SELECT status, count(*) AS n FROM jobs WHERE id = ANY(%s) GROUP BY status", (ids,))
    return {r["status"]: r["n"] for r in rows}


def test_reaper_recovers_expired_leases_in_batches(conn, tenant, t0):
    ids = enqueue(conn, tenant, 7)
    last = enqueue(conn, tenant, 2, max_attempts=1)
    jobqueue.claim_batch(conn, "default", "w", 100, 10, now=t0)
    reaper = Reaper(ReaperConfig(batch=3))
    assert reaper.run_once(conn, now=t0 + timedelta(seconds=9)) == 0
    assert reaper.run_once(conn, now=t0 + timedelta(seconds=11)) == 9
    assert statuses(conn, ids) == {"retryable": 7}
    assert statuses(conn, last) == {"dead": 2}
    n = conn.execute("SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s) AND outcome = 'lease_expired'",
                     (ids + last,)).fetchone()["n"]
    assert n == 9
    # Recovered jobs back off (2^attempts s, jittered by half: 1-2 s after a first attempt),
    # so that a job that kills its worker cannot crash-loop the fleet; they keep their attempt count.
    assert jobqueue.claim_batch(conn, "default", "w2", 100, 10, now=t0 + timedelta(seconds=11.9)) == []
    waits = conn.execute("SELECT extract(epoch FROM available_at - %s) AS w FROM jobs WHERE id = ANY(%s)",
                         (t0 + timedelta(seconds=11), ids)).fetchall()
    assert all(1.0 - 1e-3 <= float(r["w"]) <= 2.0 + 1e-3 for r in waits)
    again = jobqueue.claim_batch(conn, "default", "w2", 100, 10, now=t0 + timedelta(seconds=13.1))
    assert sorted(r["id"] for r in again) == sorted(ids) and {r["attempts"] for r in again} == {2}
    assert reaper.run_once(conn, now=t0 + timedelta(seconds=13.1)) == 0


def test_expiry_in_batches(conn, tenant, t0):
    ids = enqueue(conn, tenant, 5, expires_at=t0 + timedelta(minutes=1))
    assert Expiry(ExpiryConfig(batch=2)).run_once(conn, now=t0 + timedelta(minutes=1)) == 5
    assert statuses(conn, ids) == {"dead": 5}
    assert {r["last_error_code"] for r in conn.execute("SELECT last_error_code FROM jobs WHERE id = ANY(%s)", (ids,))} \
        == {"expired"}


def test_expiry_takes_retryable_jobs_too(conn, tenant, t0):
    [j] = enqueue(conn, tenant, 1, expires_at=t0 + timedelta(minutes=1))
    rows = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    finish(conn, rows, "retryable", t0, code="http_503")
    assert Expiry().run_once(conn, now=t0 + timedelta(minutes=2)) == 1
    assert jobqueue.get_job(conn, j)["status"] == "dead"


def test_pruner_deletes_old_finished_jobs_with_their_attempts_and_keeps_dead_ones(conn, tenant, t0):
    ok = enqueue(conn, tenant, 4)
    dead = enqueue(conn, tenant, 2)
    rows = {r["id"]: r for r in jobqueue.claim_batch(conn, "default", "w", 100, 30, now=t0)}
    finish(conn, [rows[i] for i in ok], "succeeded", t0)
    finish(conn, [rows[i] for i in dead], "dead", t0, code="http_410")
    cancelled = enqueue(conn, tenant, 1)
    jobqueue.cancel(conn, cancelled[0], now=t0)
    pending = enqueue(conn, tenant, 1)
    # Dead jobs kept until purged by hand (OPSBOARD_DEAD_RETENTION_DAYS=0; their own retention is
    # tested in test_bulk_exact.py::test_the_pruner_deletes_dead_jobs_past_the_retention).
    pruner = Pruner(PrunerConfig(retention_days=7, batch=2, dead_retention_days=0))

    # Within the retention nothing goes.
    assert pruner.run_once(conn, now=t0 + timedelta(days=6)) == 0
    assert pruner.run_once(conn, now=t0 + timedelta(days=8)) == 5
    left = {r["id"] for r in conn.execute("SELECT id FROM jobs WHERE id = ANY(%s)", (ok + dead + cancelled + pending,))}
    assert left == set(dead + pending)
    assert conn.execute("SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s)", (ok,)).fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s)", (dead,)).fetchone()["n"] == 2
    assert pruner.run_once(conn, now=t0 + timedelta(days=365)) == 0


class Ticks:
    """A clock for the pacing: each reading is one second after the last."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def test_the_pruner_deletes_a_backlog_in_paced_slices_that_resume_where_the_last_stopped(conn, tenant, t0):
    """A slice stops after the batch that crossed its deadline (here the first: the clock moves a second per
    reading) and sets the service's interval to its rest; the next resumes after the last id read; the
    slice that reaches the cutoff puts the interval back, and the next pass starts from the oldest job
    again.  The oldest job finished later than the rest: it becomes old enough only while the walk is past
    it, so it waits for the next pass.  (Without the deadline the first run deletes all six; without the
    resume point the second slice goes back for it.)"""
    [late] = enqueue(conn, tenant, 1)
    ok = enqueue(conn, tenant, 6)
    rows = {r["id"]: r for r in jobqueue.claim_batch(conn, "default", "w", 100, 30, now=t0)}
    finish(conn, [rows[late]], "succeeded", t0 + timedelta(days=2))
    finish(conn, [rows[i] for i in ok], "succeeded", t0)
    pruner = Pruner(PrunerConfig(retention_days=7, batch=2, pace=Pace(slice_seconds=1.0, duty=0.5)), clock=Ticks())
    deleted, rests, resumed = [], [], []
    for day in (8, 10, 10, 10):
        deleted.append(pruner.run_once(conn, now=t0 + timedelta(days=day)))
        rests.append(pruner.interval)
        resumed.append(pruner.resume_after)
    assert deleted == [2, 2, 2, 0]
    # Each slice read two readings past its start: a rest as long as it worked (duty 0.5).
    assert rests == [2.0, 2.0, 2.0, 60.0]
    assert resumed == [ok[1], ok[3], ok[5], None]
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s)", (ok,)).fetchone()["n"] == 0
    assert jobqueue.get_job(conn, late) is not None
    assert pruner.run_once(conn, now=t0 + timedelta(days=10)) == 1 and pruner.interval == 60.0
    assert jobqueue.get_job(conn, late) is None
    # A lower duty rests longer after the same slice: t * (1 - 0.25) / 0.25.
    more = enqueue(conn, tenant, 3)
    finish(conn, jobqueue.claim_batch(conn, "default", "w", 100, 30, now=t0), "succeeded", t0)
    slow = Pruner(PrunerConfig(retention_days=7, batch=2, pace=Pace(duty=0.25)), clock=Ticks())
    assert slow.run_once(conn, now=t0 + timedelta(days=8)) == 2 and slow.interval == 6.0
    assert slow.run_once(conn, now=t0 + timedelta(days=8)) == 1 and slow.interval == 60.0
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s)", (more,)).fetchone()["n"] == 0


def test_the_outbox_pruner_paces_a_backlog_of_relayed_events(conn, tenant, t0):
    from opsboard import outbox
    from worker.services.outbox_pruner import OutboxPruner, OutboxPrunerConfig
    for i in range(5):
        ticket = str(uuid.uuid4())
        outbox.publish(conn, "ticket.created", 1, aggregate=("ticket", ticket), tenant=tenant["id"],
                       payload={"ticket_id": ticket, "priority": "normal"})
    conn.execute("UPDATE outbox_events SET relayed_at = %s WHERE tenant_id = %s", (t0, tenant["id"]))
    ids = [r["id"] for r in conn.execute("SELECT id FROM outbox_events WHERE tenant_id = %s ORDER BY id",
                                         (tenant["id"],))]
    pruner = OutboxPruner(OutboxPrunerConfig(batch=2, pace=Pace(duty=0.5)), clock=Ticks())
    later = t0 + timedelta(days=8)
    runs = []
    for _ in range(5):
        runs.append((pruner.run_once(conn, now=later), pruner.interval, pruner.resume_after))
        if pruner.interval == OutboxPrunerConfig().interval:
            break
    # Each slice resumes after the last id the one before read; the last one reaches the cutoff.
    assert runs == [(2, 2.0, ids[1]), (2, 2.0, ids[3]), (1, 60.0, None)]
    assert conn.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 0


def test_the_outbox_pruner_forgets_a_backlog_of_idempotency_keys_in_paced_batches(conn, tenant, t0):
    """Old keys go a batch at a time, oldest first, paced like the events (one unbounded DELETE before:
    after a day without a leader at a high API rate, millions of rows in one statement); a key within
    its 24 hours stays."""
    from worker.services.outbox_pruner import OutboxPruner, OutboxPrunerConfig
    for i in range(5):
        conn.execute("INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response, created_at) "
                     "VALUES (%s, %s, '\\x00', 202, '{}', %s)", (tenant["id"], f"old-{i}", t0 + timedelta(minutes=i)))
    conn.execute("INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response, created_at) "
                 "VALUES (%s, 'fresh', '\\x00', 202, '{}', %s)", (tenant["id"], t0 + timedelta(hours=30)))
    pruner = OutboxPruner(OutboxPrunerConfig(batch=2, pace=Pace(duty=0.5)), clock=Ticks())
    left, rests = [], []
    for _ in range(5):
        pruner.run_once(conn, now=t0 + timedelta(hours=40))
        rests.append(pruner.interval)
        left.append([r["key"] for r in conn.execute(
            "SELECT key FROM api_idempotency WHERE tenant_id = %s ORDER BY created_at", (tenant["id"],))])
        if pruner.interval == OutboxPrunerConfig().interval:
            break
    assert rests == [2.0, 2.0, 60.0]
    assert left == [["old-2", "old-3", "old-4", "fresh"], ["old-4", "fresh"], ["fresh"]]


@pytest.mark.parametrize("bad", [{"duty": 0}, {"duty": 1.5}, {"slice_seconds": 0}, {"duty": float("nan")}])
def test_a_pace_out_of_range_is_refused(bad):
    with pytest.raises(ValueError):
        Pace(**bad)


def test_a_pace_rests_in_proportion_to_the_slice_and_not_at_all_when_the_backlog_is_gone():
    assert Pace(duty=0.5).next_interval(1.2, True, 60.0) == pytest.approx(1.2)
    assert Pace(duty=1.0).next_interval(1.2, True, 60.0) == 0.0
    assert Pace(duty=0.2).next_interval(1.0, True, 60.0) == pytest.approx(4.0)
    assert Pace().next_interval(1.0, False, 60.0) == 60.0


def test_pruner_keeps_a_replayed_dead_job_and_prunes_its_succeeded_replay(conn, tenant, t0):
    from opsboard import audit
    [j] = enqueue(conn, tenant, 1)
    rows = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    finish(conn, rows, "dead", t0, code="x")
    new = jobqueue.replay(conn, j, audit.Actor(label="ops"), "retry", None)
    rows = jobqueue.claim_batch(conn, "default", "w", 1, 30, now=t0)
    finish(conn, rows, "succeeded", t0)
    assert Pruner().run_once(conn, now=t0 + timedelta(days=30)) == 1
    assert jobqueue.get_job(conn, j)["status"] == "dead"
    assert jobqueue.get_job(conn, new["id"]) is None


def test_uuid7_floor_orders_with_ids_made_at_that_time(t0):
    from opsboard.schema import new_id
    made = new_id()
    assert uuid7_floor(t0 - timedelta(seconds=1)) < made < uuid7_floor(t0 + timedelta(days=1))
    assert uuid7_floor(t0).version == 7


def _wait_backend_gone(url, pid, timeout=15.0):
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as c:
        while c.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, f"backend {pid} still alive after {timeout} s"
            time.sleep(0.05)


def test_only_one_leader_at_a_time(db_url):
    a, b = LeaderLock(db_url), LeaderLock(db_url)
    try:
        assert a.try_hold() is True
        assert b.try_hold() is False
        assert a.try_hold() is True  # still held
        a.release()
        assert b.try_hold() is True  # at once: release() unlocked, it did not leave it to the server
        assert a.try_hold() is False
        # A leader whose connection dies loses the lock with it (once the server
        # has ended that backend: closing the socket is not instant on a busy server).
        pid = b.conn.info.backend_pid
        b.conn.close()
        _wait_backend_gone(db_url, pid)
        assert a.try_hold() is True
        assert b.try_hold() is False
    finally:
        a.release()
        b.release()


def test_release_hands_over_even_before_the_server_ends_the_old_backend(db_url, monkeypatch):
    a, b = LeaderLock(db_url), LeaderLock(db_url)
    conn = None
    try:
        assert a.try_hold() is True
        # Keep a's backend alive after release(), as a busy server does for a while after the
        # socket closed: only an explicit unlock can let b in now.
        conn, pid = a.conn, a.conn.info.backend_pid
        monkeypatch.setattr(conn, "close", lambda: None)
        a.release()
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == pid  # still there
        assert b.try_hold() is True
    finally:
        monkeypatch.undo()
        if conn is not None:
            conn.close()
        a.release()
        b.release()


def test_release_tolerates_a_connection_the_server_already_ended(db_url):
    a, b = LeaderLock(db_url), LeaderLock(db_url)
    try:
        assert a.try_hold() is True
        pid = a.conn.info.backend_pid
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _wait_backend_gone(db_url, pid)
        a.release()  # the unlock fails on the dead connection: not an error
        assert a.conn is None and a.held is False
        assert b.try_hold() is True
    finally:
        a.release()
        b.release()
