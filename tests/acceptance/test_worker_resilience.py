"""Worker resilience (issue 16): hung handler queries cannot starve the worker."""
import time

from opsboard import auth, jobqueue
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for


def test_hung_handler_queries_do_not_delay_quick_jobs(db_url, start_worker):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        hung = jobqueue.enqueue_many(c, [NewJob("test.slow_query", {}, t, priority=0) for _ in range(8)])
        quick = jobqueue.enqueue_many(c, [NewJob("diag.noop", {}, t) for _ in range(300)])
        started = time.monotonic()
        w = start_worker(db_url, "--queues", "default=4", "--id", "w-hung")
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'", quick)
                 == 300, timeout=30, message="the quick jobs to succeed")
        took = time.monotonic() - started
        # 8 handlers stuck 35 s each in the database on 4 slots: without the
        # handler pool, the timeouts and the cancel, this takes well over 30 s.
        assert took < 15, took
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'dead'", hung) == 8,
                 timeout=15, message="the hung jobs to be recorded")
        assert {r["error_code"] for r in c.execute(
            "SELECT error_code FROM job_attempts WHERE job_id = ANY(%s)", (hung,))} == {"timeout"}
        # Their queries were cancelled, not left running in the server.
        wait_for(lambda: n("SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(35)%%' "
                           "AND state = 'active' AND datname = current_database()") == 0,
                 timeout=5, message="the hung queries to be cancelled")
    w.terminate()
    assert w.wait(30) == 0


def test_a_paused_worker_cannot_begin_an_effect_after_its_lease_was_taken_over(db_url, start_worker):
    import signal

    from tests.acceptance.test_chaos import reap_until

    lease = {"OPSBOARD_LEASE_SECONDS": "2", "OPSBOARD_POLL_INTERVAL": "0.2"}
    with connect(db_url) as c:
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
                  "at timestamptz DEFAULT clock_timestamp())")
        t = auth.ensure_tenant(c, "acme")["id"]
        job = jobqueue.enqueue(c, "test.guarded", {"key": "sent"}, tenant=t)
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        a = start_worker(db_url, "--queues", "default=1", "--id", "w-paused", "--no-services", **lease)
        wait_for(lambda: n("SELECT count(*) AS n FROM test_effects WHERE key = 'ready'"), timeout=30,
                 message="the handler to start")
        a.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM...
        try:
            reap_until(c, 1)  # its lease runs out; the job is retried
            b = start_worker(db_url, "--queues", "default=1", "--id", "w-live", "--no-services", **lease)
            wait_for(lambda: jobqueue.get_job(c, job["id"])["status"] == "succeeded", timeout=30,
                     message="the second attempt to succeed")
        finally:
            a.send_signal(signal.SIGCONT)
        # The paused handler wakes up past its check and tries to begin the effect.
        wait_for(lambda: n("SELECT count(*) AS n FROM test_effects WHERE key IN ('stale', 'confused')"), timeout=30,
                 message="the resumed handler to be refused")
        assert [r["worker"] for r in c.execute("SELECT worker FROM test_effects WHERE key = 'sent'")] == ["w-live"]
        assert n("SELECT count(*) AS n FROM test_effects WHERE key = 'stale'") == 1  # still_held() said no
        eff = c.execute("SELECT state, attempt, job_id FROM effects").fetchone()
        assert (eff["state"], eff["attempt"], eff["job_id"]) == ("confirmed", 2, job["id"])
        assert [(x["attempt"], x["worker"], x["outcome"]) for x in jobqueue.attempts(c, job["id"])] == \
            [(1, "w-paused", "lease_expired"), (2, "w-live", "succeeded")]
    for p in (a, b):
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0


def test_supervisor_restarts_a_crashed_worker_and_the_poison_job_ends_crashed_worker(db_url, start_worker):
    import signal

    with connect(db_url) as c:
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
                  "at timestamptz DEFAULT clock_timestamp())")
        t = auth.ensure_tenant(c, "acme")["id"]
        # test.suicide SIGKILLs its own process; 2 attempts.
        [poison] = jobqueue.enqueue_many(c, [NewJob("test.suicide", {}, t)])
        good = jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"k{i}", "ms": 20}, t) for i in range(60)])
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        sup = start_worker(db_url, "--processes", "2", "--queues", "default=2", "--id", "sup")
        wait_for(lambda: jobqueue.get_job(c, poison)["status"] == "dead", timeout=60, message="the poison job to die")
        j = jobqueue.get_job(c, poison)
        assert (j["last_error_code"], j["attempts"]) == ("crashed_worker", 2)
        counted = [a["error_code"] for a in jobqueue.attempts(c, poison) if a["outcome"] != "released"]
        assert counted == ["crashed_worker", "crashed_worker"]
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'", good) == 60,
                 timeout=60, message="the innocent jobs to succeed")
        # Nothing waited for a lease: no attempt anywhere ended lease_expired.
        assert n("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lease_expired'") == 0
        # Innocent jobs caught in a crash were released without counting it.
        assert n("SELECT count(*) AS n FROM job_attempts WHERE job_id = ANY(%s) AND error_code = 'crashed_worker'",
                 good) == 0
        # The supervisor restarted the dead processes: two live workers again.
        wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id LIKE 'sup-%%'") == 2, timeout=30,
                 message="two workers again")
    log = sup.log_path.read_text()
    assert f"while running job {poison} (test.suicide)" in log
    assert "restarting worker" in log
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(40) == 0
