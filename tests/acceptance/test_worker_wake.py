"""Fetcher and listener across processes: a group job finishing in one worker
wakes the claimer of another worker, through the NOTIFY alone."""
import signal

from opsboard import auth, jobqueue
from opsboard.tools import demo_domain
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for

EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"
# Polling is an hour away: only a notification can make worker b look again.
SLOW_POLL = {"OPSBOARD_POLL_INTERVAL": "60"}


def test_group_job_finishing_in_one_worker_wakes_a_claimer_in_another(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        first, second = jobqueue.enqueue_many(c, [
            NewJob("test.slow", {"key": "g1", "ms": 4000}, t, group_key="order-1"),
            NewJob("test.slow", {"key": "g2", "ms": 10}, t, group_key="order-1")])
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        a = start_worker(db_url, "--queues", "default=1", "--id", "worker-a", "--no-services", **SLOW_POLL)
        wait_for(lambda: n("SELECT count(*) AS n FROM test_effects WHERE key = 'g1'"), timeout=30,
                 message="worker a to start the group's first job")
        b = start_worker(db_url, "--queues", "default=1", "--id", "worker-b", "--no-services", **SLOW_POLL)
        # b is up (it registered, listened and found nothing it may run: g2 waits for g1).
        wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id = 'worker-b'"), timeout=30,
                 message="worker b to start")
        assert jobqueue.get_job(c, second)["status"] == "pending"
        # a stops claiming now, finishes g1 within its grace, then exits.
        a.send_signal(signal.SIGTERM)
        wait_for(lambda: jobqueue.get_job(c, second)["status"] == "succeeded", timeout=20,
                 message="worker b to be woken for the group's next job")
        assert jobqueue.get_job(c, first)["status"] == "succeeded"
        [run] = c.execute("SELECT worker FROM test_effects WHERE key = 'g2'").fetchall()
        assert run["worker"] == "worker-b"
        assert a.wait(30) == 0
        b.send_signal(signal.SIGTERM)
        assert b.wait(30) == 0


def test_a_worker_process_holds_exactly_one_listen_connection(db_url, start_worker):
    """The fetchers' wake-ups and the relay share the process's one hub (opsboard.pgnotify)."""
    with connect(db_url) as c:
        c.execute(EFFECTS)
        tenant = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        # This database is the test's own: every backend in it besides ours is the worker's.
        listening = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() " \
                    "AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%%'"
        w = start_worker(db_url, "--queues", "critical=1,default=1,bulk=1", "--id", "worker-one", **SLOW_POLL)
        wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id = 'worker-one'"), timeout=30,
                 message="the worker to start")
        wait_for(lambda: n(listening), timeout=30, message="the worker to listen")
        # Both channels are served (the fallback polls are a minute away) ...
        job = jobqueue.enqueue(c, "test.record", {"key": "one"}, tenant=tenant)
        wait_for(lambda: jobqueue.get_job(c, job["id"])["status"] == "succeeded", timeout=15,
                 message="the job to run on its notification")
        with connect(db_url) as producer:
            event = demo_domain.sign_up_user(producer, tenant, "one@example.test")["event"]
        wait_for(lambda: n("SELECT count(*) AS n FROM outbox_events WHERE id = %s AND relayed_at IS NOT NULL",
                           event["id"]), timeout=15, message="the event to be relayed on its notification")
        # ... through one connection.
        assert n(listening) == 1
        assert n("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                 "AND pid <> pg_backend_pid() AND query ILIKE '%%LISTEN%%'") == 1
        w.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0
