"""Killed workers and poison jobs: nothing is lost, nothing succeeds twice.

The worker runs as a real subprocess with a 2-second lease.  Leases run out
in real time (the subprocess took them with the database clock), so these
tests poll the reaper until they do; everything else is event-driven.
Sizes scale with ``OPSBOARD_CHAOS_SCALE`` (default 1).
"""
import os
import signal
import pytest

from opsboard import auth, jobqueue
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for
from worker.services.reaper import Reaper

pytestmark = pytest.mark.chaos

EFFECTS = ("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
           "at timestamptz DEFAULT clock_timestamp())")
SCALE = float(os.environ.get("OPSBOARD_CHAOS_SCALE", "1"))
LEASE = {"OPSBOARD_LEASE_SECONDS": "2", "OPSBOARD_POLL_INTERVAL": "0.2"}


def scaled(n: int) -> int:
    return max(1, int(n * SCALE))


def one(c, sql, *args):
    return c.execute(sql, args).fetchone()["n"]


@pytest.fixture
def db(db_url):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        yield c


def reap_until(db, expected: int, timeout: float = 20.0) -> int:
    """Run the reaper (real clock) until ``expected`` jobs were recovered."""
    reaper, got = Reaper(), [0]

    def step():
        got[0] += reaper.run_once(db)
        return got[0] >= expected

    wait_for(step, timeout=timeout, interval=0.1, message=f"the reaper to recover {expected} jobs")
    return got[0]


def test_sigkill_while_jobs_run_then_the_reaper_recovers_them(db_url, db, start_worker):
    n, m = scaled(6), scaled(2)
    t = auth.ensure_tenant(db, "acme")
    retried = jobqueue.enqueue_many(db, [NewJob("test.slow", {"key": f"r{i}", "ms": 1500}, t["id"]) for i in range(n)])
    last = jobqueue.enqueue_many(db, [NewJob("test.slow", {"key": f"l{i}", "ms": 1500}, t["id"], max_attempts=1)
                                   for i in range(m)])
    a = start_worker(db_url, "--queues", f"default={n + m}", "--id", "worker-a", "--no-services", **LEASE)
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM test_effects") == n + m, timeout=30,
             message="every handler to start")
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'running' AND locked_by = 'worker-a'") == n + m

    assert reap_until(db, n + m) == n + m
    for job_id in last:
        j = jobqueue.get_job(db, job_id)
        assert (j["status"], j["last_error_code"], j["attempts"]) == ("dead", "lease_expired", 1)
        [att] = jobqueue.attempts(db, job_id)
        assert (att["outcome"], att["worker"], att["attempt"]) == ("lease_expired", "worker-a", 1)
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'retryable' AND last_error_code = 'lease_expired'") == n

    b = start_worker(db_url, "--queues", "default=4", "--id", "worker-b", **LEASE)
    wait_for(lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == n, timeout=60,
             message="the recovered jobs to succeed")
    for job_id in retried:
        j = jobqueue.get_job(db, job_id)
        assert (j["status"], j["attempts"]) == ("succeeded", 2)
        assert [(x["attempt"], x["worker"], x["outcome"]) for x in jobqueue.attempts(db, job_id)] == \
            [(1, "worker-a", "lease_expired"), (2, "worker-b", "succeeded")]
    # One run per attempt: the killed run and the one that succeeded.
    runs = db.execute("SELECT job_id, array_agg(worker ORDER BY attempt) AS w FROM test_effects "
                      "WHERE job_id = ANY(%s) GROUP BY job_id", (retried,)).fetchall()
    assert len(runs) == n and all(r["w"] == ["worker-a", "worker-b"] for r in runs)
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'dead'", last) == m
    b.send_signal(signal.SIGTERM)
    assert b.wait(30) == 0


def test_killing_workers_mid_run_loses_nothing_and_succeeds_each_job_once(db_url, db, start_worker):
    total = scaled(1500)
    tenants = [auth.ensure_tenant(db, f"t{i}")["id"] for i in range(3)]
    jobqueue.enqueue_many(db, [NewJob("test.record", {"key": f"k{i}", "ms": 2}, tenants[i % 3], max_attempts=10)
                            for i in range(total)])
    procs = [start_worker(db_url, "--queues", "default=6", "--id", f"w{i}", "--no-services", **LEASE) for i in range(3)]
    succeeded = lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'")
    killed = 0
    for round_ in range(2):
        # Kill a worker once the run has made some progress, while it holds jobs.
        target = total * (round_ + 1) // 4
        wait_for(lambda: succeeded() >= target, timeout=120, message=f"{target} jobs to succeed")
        victim = procs[round_]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed += 1
        procs.append(start_worker(db_url, "--queues", "default=6", "--id", f"w-restart-{round_}", "--no-services", **LEASE))
    reaper = Reaper()

    def done():
        reaper.run_once(db)  # leases of the killed workers run out in real time
        return succeeded() == total

    wait_for(done, timeout=180, interval=0.2, message=f"all {total} jobs to succeed")
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE status <> 'succeeded'") == 0
    assert db.execute("SELECT job_id FROM job_attempts WHERE outcome = 'succeeded' GROUP BY job_id "
                      "HAVING count(*) <> 1").fetchall() == []
    assert one(db, "SELECT count(DISTINCT job_id) AS n FROM job_attempts WHERE outcome = 'succeeded'") == total
    # Every effect beyond one per job belongs to a run whose lease was lost.
    extra = one(db, "SELECT count(*) - count(DISTINCT job_id) AS n FROM test_effects")
    lost = one(db, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lease_expired'")
    assert extra <= lost
    assert one(db, "SELECT count(DISTINCT job_id) AS n FROM test_effects") == total
    for p in procs[killed:]:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0


def test_poison_jobs_die_while_other_types_and_tenants_finish(db_url, db, start_worker):
    poisoned, healthy = auth.ensure_tenant(db, "poisoned")["id"], auth.ensure_tenant(db, "healthy")["id"]
    poison = {
        "test.raise": jobqueue.enqueue_many(db, [NewJob("test.raise", {}, poisoned) for _ in range(scaled(3))]),
        "test.hang": jobqueue.enqueue_many(db, [NewJob("test.hang", {}, poisoned) for _ in range(scaled(2))]),
        "test.suicide": jobqueue.enqueue_many(db, [NewJob("test.suicide", {}, poisoned) for _ in range(scaled(1))]),
    }
    n = scaled(150)
    good = jobqueue.enqueue_many(db, [NewJob("test.record", {"key": f"{t}-{i}", "ms": 5}, t, max_attempts=10)
                                   for i in range(n) for t in (poisoned, healthy)])
    all_ids = good + [i for ids in poison.values() for i in ids]
    final = lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE status IN ('succeeded', 'dead')")

    # The built-in supervisor restarts a worker killed by the suicide job and
    # settles what it held at once: the suspect counts crashed_worker, the jobs
    # beside it are released without counting, so no lease has to run out.
    sup = start_worker(db_url, "--processes", "1", "--queues", "default=4", "--no-services", **LEASE)
    reaper = Reaper()

    def done():
        reaper.run_once(db)  # must find nothing: the supervisor settles crashes itself
        return final() == len(all_ids)

    wait_for(done, timeout=120, interval=0.1, message="every job to succeed or die")

    assert one(db, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'", good) == len(good)
    assert db.execute("SELECT job_id FROM job_attempts WHERE job_id = ANY(%s) AND outcome = 'succeeded' "
                      "GROUP BY job_id HAVING count(*) <> 1", (good,)).fetchall() == []
    expected_code = {"test.raise": "runtime_error", "test.hang": "timeout", "test.suicide": "crashed_worker"}
    for type_, ids in poison.items():
        for job_id in ids:
            j = jobqueue.get_job(db, job_id)
            assert j["status"] == "dead" and j["attempts"] == j["max_attempts"], (type_, j)
            assert j["last_error_code"] == expected_code[type_], (type_, j)
            counted = [a for a in jobqueue.attempts(db, job_id) if a["outcome"] != "released"]
            assert len(counted) == j["max_attempts"]
            assert {a["error_code"] for a in counted} == {expected_code[type_]}, (type_, counted)
    assert one(db, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lease_expired'") == 0
    # Each suicide run killed its worker, and the supervisor restarted it.
    assert sup.log_path.read_text().count("restarting worker") >= 2
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(30) == 0


def test_sigterm_mid_run_hands_every_claimed_job_back(db_url, db, start_worker):
    # Enough work that the stayer alone (4 slots with a prefetch buffer: about
    # 800 jobs/s of 5 ms) cannot finish it before the third leaver is busy.
    total = scaled(6000)
    t = auth.ensure_tenant(db, "acme")
    jobqueue.enqueue_many(db, [NewJob("test.record", {"key": f"k{i}", "ms": 5}, t["id"]) for i in range(total)])
    env = {**LEASE, "OPSBOARD_LEASE_SECONDS": "600", "OPSBOARD_SHUTDOWN_GRACE_SECONDS": "1"}
    stayer = start_worker(db_url, "--queues", "default=4", "--id", "stayer", "--no-services", **env)
    succeeded = lambda: one(db, "SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'")
    for round_ in range(3):
        leaver = start_worker(db_url, "--queues", "default=8", "--id", f"leaver-{round_}", "--no-services", **env)
        wait_for(lambda: one(db, "SELECT count(*) AS n FROM test_effects WHERE worker = %s", f"leaver-{round_}") >= 20,
                 timeout=60, message="the leaver to be busy")
        leaver.send_signal(signal.SIGTERM)
        assert leaver.wait(30) == 0
        # Without any reaper: a stopped worker holds nothing.
        assert one(db, "SELECT count(*) AS n FROM jobs WHERE locked_by = %s", f"leaver-{round_}") == 0
    # The lease is long and nothing reaps: every job must come back by release alone.
    wait_for(lambda: succeeded() == total, timeout=120, interval=0.2, message=f"all {total} jobs to succeed")
    assert db.execute("SELECT job_id FROM job_attempts WHERE outcome = 'succeeded' GROUP BY job_id "
                      "HAVING count(*) <> 1").fetchall() == []
    assert one(db, "SELECT count(*) AS n FROM jobs WHERE attempts <> 1") == 0
    stayer.send_signal(signal.SIGTERM)
    assert stayer.wait(30) == 0
