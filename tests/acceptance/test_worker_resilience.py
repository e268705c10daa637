"""Worker resilience (issue 16): hung handler queries cannot starve the worker."""
import time

from opsboard import auth, queue
from opsboard.queue import NewJob
from tests.conftest import connect, wait_for


def test_hung_handler_queries_do_not_delay_quick_jobs(db_url, start_worker):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        hung = queue.enqueue_many(c, [NewJob("test.slow_query", {}, t, priority=0) for _ in range(8)])
        quick = queue.enqueue_many(c, [NewJob("diag.noop", {}, t) for _ in range(300)])
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
