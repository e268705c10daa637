import uuid

from opsboard import auth, jobqueue
from tests.conftest import connect, wait_for

EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"


def test_worker_processes_enqueued_jobs(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")
        ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.record", {"key": f"k{i}"}, t["id"]) for i in range(50)])
    w = start_worker(db_url, "--queues", "default=4,critical=1")
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status='succeeded'").fetchone()["n"] == 50,
                 message="50 jobs to succeed")
        assert c.execute("SELECT count(*) AS n FROM test_effects").fetchone()["n"] == 50
        assert c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome='succeeded'").fetchone()["n"] == 50
    w.terminate()
    assert w.wait(20) == 0


def test_a_worker_whose_claim_other_claims_left_empty_claims_again_before_its_poll_interval(db_url, start_worker):
    """Due jobs held by another claim (row locks) when the worker claims: its claim comes back empty,
    and the jobs are released without a new enqueue, so no notification wakes the worker.  It must not
    wait its poll interval (30 s here): in `opsboard bench --peers` one worker drained 19,936 of
    20,000 jobs while the other, whose claims found the first worker's candidates, slept."""
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.record", {"key": f"k{i}"}, t["id"]) for i in range(5)])
    with connect(db_url) as holder, connect(db_url) as c:
        with holder.transaction():
            assert len(holder.execute("SELECT id FROM jobs WHERE status = 'pending' FOR UPDATE").fetchall()) == 5
            start_worker(db_url, "--queues", "default=4", OPSBOARD_POLL_INTERVAL=30)
            # The worker's claim has run (and passed the locked rows over) once one of its backends shows
            # the claim as its last statement, finished.
            others = (holder.info.backend_pid, c.info.backend_pid)
            wait_for(lambda: c.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> ALL(%s) AND state = 'idle' AND query LIKE '%%tenants_ready%%'",
                (list(others),)).fetchone()["n"] >= 1, message="the worker's first claim")
            assert c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'").fetchone()["n"] == 5
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 5,
                 timeout=10, message="the 5 jobs to succeed well before the poll interval")
