"""The worker's completer: one refused outcome does not hold back the rest of its batch, and a
handler's words PostgreSQL cannot store (NUL, a lone surrogate) are recorded, cleaned (issue 51)."""
from datetime import datetime, timezone

from opsboard import auth, jobqueue
from tests.conftest import connect, make_config
from worker.completer import UNSTORABLE_CODE
from worker.runner import Worker


def _claimed(db_url, w, n):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t, max_attempts=2) for _ in range(n)])
    with w.pool.connection() as conn:
        return jobqueue.claim_batch(conn, "default", w.id, n, 30)


def _jobs(db_url):
    with connect(db_url) as c:
        return {r["id"]: r for r in c.execute("SELECT id, status, last_error_code, attempts FROM jobs")}


def test_refused_record_is_isolated_and_recorded_as_a_failure_of_its_own_job(db_url):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-test")
    w.pool.open(wait=True)
    try:
        rows = _claimed(db_url, w, 3)
        now = datetime.now(timezone.utc)
        good = [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded", now) for r in rows[:2]]
        # An outcome kind the attempts table refuses (CHECK constraint): the whole statement fails.
        bad = jobqueue.OutcomeRecord(rows[2]["id"], rows[2]["attempts"], "exploded", now)
        w.completer.write_outcomes([(good[0], "default", "diag.noop", False), (bad, "default", "diag.noop", False),
                                    (good[1], "default", "diag.noop", False)])
        jobs = _jobs(db_url)
        assert jobs[rows[0]["id"]]["status"] == jobs[rows[1]["id"]]["status"] == "succeeded"
        # Not left running for the reaper to hand out again: a failure of its own, counted.
        assert jobs[rows[2]["id"]]["status"] == "retryable"
        assert jobs[rows[2]["id"]]["last_error_code"] == UNSTORABLE_CODE
        with connect(db_url) as c:
            [att] = c.execute("SELECT outcome, detail FROM job_attempts WHERE job_id = %s", (rows[2]["id"],))
        assert att["outcome"] == "retryable" and "exploded" in att["detail"]
        stats = w.stats.take(w.id)[0]
        assert stats["succeeded"] == 2 and stats["retried"] == 1
    finally:
        w.pool.close()


def test_a_refused_outcome_on_the_last_attempt_is_dead(db_url):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-test")
    w.pool.open(wait=True)
    try:
        [row] = _claimed(db_url, w, 1)
        with connect(db_url) as c:
            c.execute("UPDATE jobs SET attempts = 2 WHERE id = %s", (row["id"],))
        bad = jobqueue.OutcomeRecord(row["id"], 2, "exploded", datetime.now(timezone.utc))
        w.completer.write_outcomes([(bad, "default", "diag.noop", False)])
        job = _jobs(db_url)[row["id"]]
        assert (job["status"], job["last_error_code"]) == ("dead", UNSTORABLE_CODE)
    finally:
        w.pool.close()


def test_nul_and_lone_surrogates_in_codes_and_details_are_stored_cleaned(db_url):
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-test")
    w.pool.open(wait=True)
    try:
        rows = _claimed(db_url, w, 4)
        now = datetime.now(timezone.utc)
        batch = [jobqueue.OutcomeRecord(rows[0]["id"], 1, "succeeded", now),
                 jobqueue.OutcomeRecord(rows[1]["id"], 1, "retryable", now, delay=60, code="handler_error",
                                        detail="provider said: half a pair \udc00"),
                 jobqueue.OutcomeRecord(rows[2]["id"], 1, "dead", now, code="bad\x00code", detail="a\x00b"),
                 jobqueue.OutcomeRecord(rows[3]["id"], 1, "succeeded", now)]
        w.completer.write_outcomes([(r, "default", "diag.noop", False) for r in batch])
        jobs = _jobs(db_url)
        assert [jobs[r["id"]]["status"] for r in rows] == ["succeeded", "retryable", "dead", "succeeded"]
        assert jobs[rows[2]["id"]]["last_error_code"] == "bad\ufffdcode"
        with connect(db_url) as c:
            details = {r["job_id"]: r["detail"] for r in c.execute("SELECT job_id, detail FROM job_attempts")}
        assert details[rows[1]["id"]] == "provider said: half a pair \ufffd"
        assert details[rows[2]["id"]] == "a\ufffdb"
    finally:
        w.pool.close()
