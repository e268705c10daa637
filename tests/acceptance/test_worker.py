"""The worker as a real subprocess (``python -m worker``) against a real PostgreSQL.

Sizes scale with ``OPSBOARD_CHAOS_SCALE`` (default 1).
"""
import os
import signal

import pytest

from opsboard import auth, jobqueue
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for

EFFECTS = ("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
           "at timestamptz DEFAULT clock_timestamp())")
SCALE = float(os.environ.get("OPSBOARD_CHAOS_SCALE", "1"))
#: Workers poll rarely here: waking up is NOTIFY's job.
FAST = {"OPSBOARD_POLL_INTERVAL": "0.2"}


def scaled(n: int) -> int:
    return max(1, int(n * SCALE))


def one(c, sql, *args):
    return c.execute(sql, args).fetchone()["n"]


def status_counts(c) -> dict:
    return {r["status"]: r["n"] for r in c.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status")}


@pytest.fixture
def db(db_url):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        yield c


def stop(proc, timeout=30) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def test_four_workers_run_every_job_exactly_once(db_url, db, start_worker):
    total = scaled(5000)
    workers = [start_worker(db_url, "--queues", "default=6", "--id", f"w{i}", **FAST) for i in range(4)]
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM workers") == 4, timeout=30, message="4 workers to register")
    tenants = [auth.ensure_tenant(db, f"t{i}")["id"] for i in range(3)]
    ids = []
    for start in range(0, total, 500):  # batches while the workers already claim
        ids += jobqueue.enqueue_many(db, [NewJob("test.record", {"key": f"k{i}"}, tenants[i % 3])
                                       for i in range(start, min(total, start + 500))])
    assert len(set(ids)) == total
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == total,
             timeout=120, interval=0.2, message=f"{total} jobs to succeed")

    assert one(db, "SELECT count(*) AS n FROM test_effects") == total
    assert one(db, "SELECT count(DISTINCT job_id) AS n FROM test_effects") == total
    assert one(db, "SELECT count(DISTINCT key) AS n FROM test_effects") == total
    assert status_counts(db) == {"succeeded": total}
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE attempts <> 1 OR locked_by IS NOT NULL") == 0
    per_job = db.execute("SELECT job_id, count(*) AS n FROM job_attempts WHERE outcome = 'succeeded' "
                         "GROUP BY job_id HAVING count(*) <> 1").fetchall()
    assert per_job == []
    # One attempt row per run; a job the fetcher claimed but handed back unstarted (its bounded buffer,
    # issue 50) also leaves a 'released' row with code handed_back: never a run, never anything else.
    assert one(db, "SELECT count(*) AS n FROM job_attempts WHERE outcome <> 'released'") == total
    assert one(db, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released' "
                   "AND error_code IS DISTINCT FROM 'handed_back'") == 0
    # The work was shared.
    by_worker = {r["worker"]: r["n"] for r in db.execute("SELECT worker, count(*) AS n FROM test_effects GROUP BY worker")}
    assert len(by_worker) >= 2, by_worker
    for w in workers:
        assert stop(w) == 0
    assert one(db, "SELECT count(*) AS n FROM workers") == 0


def test_a_worker_wakes_on_notify_not_on_its_poll(db_url, db, start_worker):
    w = start_worker(db_url, "--queues", "default=2", OPSBOARD_POLL_INTERVAL="60")
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM workers") == 1, message="the worker to register")
    # Give the worker's idle claim time to happen, so only a notification can wake it.
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'") >= 1,
             message="the worker to listen")
    t = auth.ensure_tenant(db, "acme")
    j = jobqueue.enqueue(db, "test.record", {"key": "wake"}, tenant=t["id"])
    wait_for(lambda: jobqueue.get_job(db, j["id"])["status"] == "succeeded", timeout=15,
             message="the job to run well before the 60s poll")
    assert stop(w) == 0


def test_a_snoozed_job_runs_again_without_counting_the_attempt(db_url, db, start_worker):
    t = auth.ensure_tenant(db, "acme")
    j = jobqueue.enqueue(db, "test.snooze", {"key": "s1"}, tenant=t["id"])
    assert j["max_attempts"] == 1
    w = start_worker(db_url, "--queues", "default=2", **FAST)
    wait_for(lambda: jobqueue.get_job(db, j["id"])["status"] == "succeeded", timeout=30, message="the snoozed job to succeed")
    done = jobqueue.get_job(db, j["id"])
    assert done["attempts"] == 1
    assert [(a["attempt"], a["outcome"], a["error_code"]) for a in jobqueue.attempts(db, j["id"])] == \
        [(1, "snoozed", "snoozed"), (1, "succeeded", None)]
    assert one(db, "SELECT count(*) AS n FROM test_effects WHERE key = 's1'") == 2
    assert stop(w) == 0


def test_graceful_shutdown_releases_running_jobs_without_counting(db_url, db, start_worker):
    t = auth.ensure_tenant(db, "acme")
    ids = jobqueue.enqueue_many(db, [NewJob("test.slow", {"key": f"s{i}", "ms": 10_000}, t["id"]) for i in range(3)])
    w = start_worker(db_url, "--queues", "default=4", OPSBOARD_SHUTDOWN_GRACE_SECONDS="1", **FAST)
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM test_effects") == 3, timeout=30, message="3 handlers to start")
    assert status_counts(db) == {"running": 3}
    assert stop(w, timeout=15) == 0
    rows = db.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    assert [(r["status"], r["attempts"], r["locked_by"]) for r in rows] == [("pending", 0, None)] * 3
    for job_id in ids:
        [a] = jobqueue.attempts(db, job_id)
        assert (a["outcome"], a["attempt"], a["error_code"]) == ("released", 1, "shutdown_grace_exceeded")
    assert one(db, "SELECT count(*) AS n FROM workers") == 0


def test_graceful_shutdown_lets_short_jobs_finish(db_url, db, start_worker):
    t = auth.ensure_tenant(db, "acme")
    jobqueue.enqueue_many(db, [NewJob("test.slow", {"key": f"s{i}", "ms": 700}, t["id"]) for i in range(2)])
    w = start_worker(db_url, "--queues", "default=2", OPSBOARD_SHUTDOWN_GRACE_SECONDS="20", **FAST)
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM test_effects") == 2, timeout=30, message="2 handlers to start")
    assert stop(w, timeout=30) == 0
    assert status_counts(db) == {"succeeded": 2}
    assert one(db, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released'") == 0


def test_failures_are_retried_then_dead_with_redacted_history(db_url, db, start_worker):
    t = auth.ensure_tenant(db, "acme")
    boom = jobqueue.enqueue(db, "test.raise", {}, tenant=t["id"])
    gone = jobqueue.enqueue(db, "test.permanent", {}, tenant=t["id"])
    w = start_worker(db_url, "--queues", "default=2", **FAST)
    wait_for(lambda: status_counts(db).get("dead") == 2, timeout=30, message="both jobs to die")
    b = jobqueue.get_job(db, boom["id"])
    assert (b["attempts"], b["last_error_code"]) == (3, "runtime_error")
    history = jobqueue.attempts(db, boom["id"])
    assert [a["outcome"] for a in history] == ["retryable", "retryable", "dead"]
    assert all("ops@example.com" not in a["detail"] and a["detail"].startswith("RuntimeError: boom")
               for a in history)
    g = jobqueue.get_job(db, gone["id"])
    assert (g["attempts"], g["last_error_code"]) == (1, "http_410")
    assert stop(w) == 0


def test_an_absurd_retry_after_does_not_poison_other_outcomes(db_url, db, start_worker):
    # Outcomes are written in batches; one unwritable outcome would sink its whole batch.
    t1, t2 = auth.ensure_tenant(db, "one")["id"], auth.ensure_tenant(db, "two")["id"]
    absurd = jobqueue.enqueue_many(db, [NewJob("test.retry_after", {"after": a}, t1) for a in ("inf", "1e12", "nan")])
    good = jobqueue.enqueue_many(db, [NewJob("test.record", {"key": f"k{i}"}, (t1, t2)[i % 2]) for i in range(40)])
    w = start_worker(db_url, "--queues", "default=8", **FAST)
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'", good) == 40,
             timeout=30, message="the other jobs to succeed")
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status <> 'running'", absurd) == 3,
             timeout=30, message="the 429 outcomes to be written")
    rows = {r["payload"]["after"]: r for r in db.execute(
        "SELECT payload, status, last_error_code, available_at - now() AS wait FROM jobs WHERE id = ANY(%s)", (absurd,))}
    for after in ("inf", "1e12"):
        assert rows[after]["status"] == "retryable" and rows[after]["last_error_code"] == "http_429"
        assert 6.9 < rows[after]["wait"].total_seconds() / 86400 <= 7  # a week at most
    assert stop(w) == 0
