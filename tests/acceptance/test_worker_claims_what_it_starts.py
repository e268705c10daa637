"""A worker claims only what it can start now (issue 50): with every slot held by slow jobs, no other
job is ``running`` (claimed) without a slot, waiting behind them.  Through ``python -m worker``."""
import time

from opsboard import auth, jobqueue
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for

FAST = {"OPSBOARD_POLL_INTERVAL": "0.2"}


def _count(c, sql, *args) -> int:
    return c.execute(sql, args).fetchone()["n"]


def test_with_every_slot_held_by_slow_jobs_nothing_else_is_claimed(db_url, start_worker):
    worker = start_worker(db_url, "--queues", "default=2", "--id", "w-slots", **FAST)
    with connect(db_url) as c:
        wait_for(lambda: _count(c, "SELECT count(*) AS n FROM workers") == 1, message="the worker to register")
        slow_tenant = auth.ensure_tenant(c, "slow")["id"]
        quick_tenant = auth.ensure_tenant(c, "quick")["id"]
        # Quick jobs first: the worker learns that its slots turn over fast (the old prefetch then
        # buffered a quarter second's worth of them: hundreds for two slots).
        jobqueue.enqueue_many(c, [NewJob("diag.noop", {}, quick_tenant) for _ in range(400)])
        wait_for(lambda: _count(c, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == 400,
                 message="the quick jobs")
        jobqueue.enqueue_many(c, [NewJob("diag.sleep", {"ms": 4000}, slow_tenant) for _ in range(2)])
        wait_for(lambda: _count(c, "SELECT count(*) AS n FROM jobs WHERE type = 'diag.sleep' AND status = 'running'")
                 == 2, message="the slow jobs to hold both slots")
        time.sleep(0.3)
        quick = jobqueue.enqueue_many(c, [NewJob("diag.noop", {}, quick_tenant) for _ in range(50)])
        samples = []
        for _ in range(30):   # about 1.5 s, while the slow jobs hold both slots
            samples.append(c.execute(
                "SELECT count(*) FILTER (WHERE type = 'diag.noop') AS quick, count(*) AS n FROM jobs"
                " WHERE status = 'running'").fetchone())
            time.sleep(0.05)
        slow_running = _count(c, "SELECT count(*) AS n FROM jobs WHERE type = 'diag.sleep' AND status = 'running'")
        assert slow_running == 2, "the slow jobs still hold the slots while sampled"
        # Never more running than slots: no quick job claimed to wait behind a slow one.
        assert max(s["n"] for s in samples) == 2, samples
        assert max(s["quick"] for s in samples) == 0, samples
        # And once the slots free, the quick jobs all run, each in one attempt.
        wait_for(lambda: _count(c, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'",
                                quick) == 50, timeout=30, message="the quick jobs after the slow ones")
        assert _count(c, "SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s)", quick) == 50
    assert worker.poll() is None
