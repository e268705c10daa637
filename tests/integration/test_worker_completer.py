"""The completer: a slow database holds the slots back; per-minute stats are flushed and read back."""
from datetime import datetime, timezone

import pytest

from opsboard import auth, jobqueue
from tests.conftest import connect, make_config, wait_for
from worker import completer
from worker.runner import Worker


def test_bounded_outcome_queue_holds_back_the_slots(db_url, monkeypatch):
    monkeypatch.setattr(completer, "OUTCOME_QUEUE_MAX", 2)
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(60)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 2}, worker_id="w-slow-db",
               run_services=False)
    blocker = connect(db_url)
    try:
        # The database is "slow": nothing can record an attempt while this lock is held.
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE job_attempts IN EXCLUSIVE MODE")
        w.start()
        qs = w.queues["default"]
        # The completer holds one batch (at most the queue's size) in a blocked
        # statement, the queue is full, and both slots wait to hand over.
        wait_for(lambda: w.completer.outcomes.full() and qs.free() == 0, timeout=20,
                 message="the slots to be held back")
        with connect(db_url) as c:
            claimed = c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"]
        # batch in the completer (<= 2) + queue (2) + slots (2)
        assert claimed <= 6, claimed
        blocker.execute("ROLLBACK")
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"]
                     == 60, timeout=30, message="every job to succeed once the database is fast again")
    finally:
        blocker.close()
        w.stop()
        w.shutdown()


def test_per_minute_stats_flush_is_read_back(db_url):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-stats",
               run_services=False)
    w.pool.open(wait=True)
    try:
        minute = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
        w.stats.add("default", "diag.noop", "succeeded", 12, at=minute.replace(second=10))
        w.stats.add("default", "diag.noop", "succeeded", 30, at=minute.replace(second=50))
        w.stats.add("default", "diag.noop", "retryable", 5, at=minute)
        w.stats.add("default", "diag.noop", "released", 5, at=minute)  # not a statistic
        assert w.completer.flush_stats() == 1
        assert w.completer.flush_stats() == 0  # nothing left
        w.stats.add("default", "diag.noop", "dead", 7, at=minute)
        assert w.completer.flush_stats() == 1  # added to the same row
        with connect(db_url) as c:
            [row] = c.execute("SELECT * FROM job_stats WHERE worker_id = 'w-stats'").fetchall()
        assert row["minute"] == minute
        assert (row["succeeded"], row["retried"], row["dead"], row["snoozed"]) == (2, 1, 1, 0)
        assert row["duration_ms_sum"] == 12 + 30 + 5 + 7
        assert sum(row["duration_hist"]) == 4
    finally:
        w.pool.close()


def test_a_failed_stats_flush_keeps_the_counts(db_url):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-stats",
               run_services=False)
    minute = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
    w.stats.add("default", "diag.noop", "succeeded", 12, at=minute)
    w.pool.open(wait=True)
    with w.pool.connection() as conn:
        conn.execute("ALTER TABLE job_stats RENAME TO job_stats_away")
    try:
        assert w.completer.flush_stats() == 0
        with w.pool.connection() as conn:
            conn.execute("ALTER TABLE job_stats_away RENAME TO job_stats")
        assert w.completer.flush_stats() == 1
        with connect(db_url) as c:
            assert c.execute("SELECT succeeded FROM job_stats").fetchone()["succeeded"] == 1
    finally:
        w.pool.close()


def test_a_deadlock_recording_outcomes_is_retried_and_is_not_an_outage(db_url, monkeypatch, caplog):
    """The outcome statement fails once with a server-raised deadlock (SQLSTATE 40P01, through a
    test hook): logged as a deadlock, retried, the outcome recorded; no outage begins."""
    import logging

    real = jobqueue.record_outcomes
    calls = {"n": 0}

    def deadlock_once(conn, worker_id, records):
        calls["n"] += 1
        if calls["n"] == 1:
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock detected (test)' "
                         "USING ERRCODE = 'deadlock_detected'; END $$")
        return real(conn, worker_id, records)
    monkeypatch.setattr(completer.jobqueue, "record_outcomes", deadlock_once)
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        job = jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-deadlock",
               run_services=False)
    outage = []
    real_trouble = w.outages.trouble
    monkeypatch.setattr(w.outages, "trouble", lambda exc, what: (real_trouble(exc, what),
                                                                 outage.append(w.outages.down_since is not None)))
    import worker.parts as parts_module
    caplog.set_level(logging.WARNING)
    parts_module.log.addHandler(caplog.handler)
    try:
        w.start()
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT status FROM jobs WHERE id = %s", (job["id"],)).fetchone()["status"]
                     == "succeeded", timeout=20, message="the outcome to be recorded after the retry")
    finally:
        parts_module.log.removeHandler(caplog.handler)
        w.stop()
        w.shutdown()
    assert calls["n"] >= 2
    assert any("deadlock in recording" in r.getMessage() for r in caplog.records)
    assert not any("database unavailable" in r.getMessage() for r in caplog.records)
    assert outage and not any(outage)
