"""The listener's channel (an enqueue notifies only when its transaction commits) and the
listener on the process's one LISTEN connection (opsboard.pgnotify.Hub)."""
from contextlib import contextmanager
from types import SimpleNamespace

import psycopg

from opsboard import auth, jobqueue, pgnotify
from opsboard.schema import JOBS_CHANNEL
from tests.conftest import connect
from worker.fetcher import HoldsCache, QueueState
from worker.listener import Listener
from worker.services.relay import CHANNEL as OUTBOX_CHANNEL


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job_and_sends_nothing(db_url):
    listener = psycopg.connect(db_url, autocommit=True)
    try:
        listener.execute(f"LISTEN {JOBS_CHANNEL}")
        with connect(db_url) as c:
            t = auth.ensure_tenant(c, "acme")["id"]
            with c.transaction(force_rollback=True):
                job = jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
                assert jobqueue.get_job(c, job["id"]) is not None  # visible inside the transaction
            assert jobqueue.get_job(c, job["id"]) is None
            assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
        assert [n.payload for n in listener.notifies(timeout=1.0)] == []
        # The same enqueue committed does notify (so the check above can fail).
        with connect(db_url) as c:
            with c.transaction():
                jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
        got = []
        for n in listener.notifies(timeout=5.0):
            got.append(n.payload)
            break
        assert got == ["default"]
    finally:
        listener.close()


# ---------------------------------------------------------------- the listener on the process's hub

QUEUES = ("critical", "default", "bulk")


def _listen_backends(c) -> list[dict]:
    """Backends of this test's own database whose last statement was a LISTEN."""
    return c.execute("SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%%'").fetchall()


@contextmanager
def _listening(db_url, **hooks):
    worker = SimpleNamespace(queues={q: QueueState(q, 1) for q in QUEUES}, holds=HoldsCache())
    hub = pgnotify.Hub(db_url, poll=0.1, name="test-hub", retry_delay=lambda failures: 0.01, **hooks)
    listener = Listener(worker.queues, worker.holds)
    _listening.last_worker = worker
    listener.subscribe(hub)
    hub.start()
    try:
        assert hub.connected.wait(10)
        yield hub, worker.queues
    finally:
        listener.close()
        hub.stop()


def _all_woken(queues, timeout=10.0) -> bool:
    return all(qs.wake.wait(timeout) for qs in queues.values())


def test_a_notification_wakes_only_the_fetcher_of_the_queue_it_names(db_url):
    with _listening(db_url) as (hub, queues), connect(db_url) as c:
        assert _all_woken(queues)  # the first LISTEN: every fetcher looks once
        [backend] = _listen_backends(c)  # all queues share the hub's one connection
        for qs in queues.values():
            qs.wake.clear()
        c.execute(f"NOTIFY {JOBS_CHANNEL}, 'bulk'")
        assert queues["bulk"].wake.wait(10)
        assert not queues["default"].wake.is_set() and not queues["critical"].wake.is_set()
        c.execute(f"NOTIFY {JOBS_CHANNEL}, 'reports'")  # a queue this worker does not serve: nobody
        c.execute(f"NOTIFY {JOBS_CHANNEL}, 'critical'")  # delivered after the one above
        assert queues["critical"].wake.wait(10)
        assert not queues["default"].wake.is_set()
        assert hub.notifications == 3


def test_a_hold_or_release_wakes_every_fetcher_and_makes_the_holds_stale(db_url):
    with _listening(db_url) as (hub, queues), connect(db_url) as c:
        assert _all_woken(queues)
        for qs in queues.values():
            qs.wake.clear()
        worker_holds = _listening.last_worker.holds
        worker_holds.get(c)
        assert worker_holds._read_at > float("-inf")
        c.execute("INSERT INTO pauses (kind, target, reason, paused_by) VALUES ('queue', 'bulk', 'x', 'ops')")
        assert _all_woken(queues)
        assert worker_holds._read_at == float("-inf")   # re-read before the next claim
        assert worker_holds.get(c).params("bulk")["queue_held"]


def test_the_hub_reconnects_after_losing_its_backend_and_wakes_every_fetcher(db_url):
    connects, errors = [], []
    with _listening(db_url, on_connect=lambda: connects.append(1), on_error=errors.append) as (hub, queues), \
            connect(db_url) as c:
        assert _all_woken(queues) and len(connects) == 1
        [backend] = _listen_backends(c)
        for qs in queues.values():
            qs.wake.clear()
        c.execute("SELECT pg_terminate_backend(%s)", (backend["pid"],))
        # A notification sent while nobody listens is lost; the reconnection's wake-up stands for it.
        c.execute(f"NOTIFY {JOBS_CHANNEL}, 'default'")
        assert _all_woken(queues)
        assert hub.connections == 2 and len(connects) == 2
        assert errors and all(isinstance(e, psycopg.OperationalError) for e in errors)
        [again] = _listen_backends(c)
        assert again["pid"] != backend["pid"]
        for qs in queues.values():
            qs.wake.clear()
        c.execute(f"NOTIFY {JOBS_CHANNEL}, 'default'")
        assert queues["default"].wake.wait(10) and not queues["bulk"].wake.is_set()


def test_waiters_registered_before_start_are_listened_by_one_statement_and_stop_wakes_them(db_url):
    hub = pgnotify.Hub(db_url, poll=0.1, name="test-hub")
    jobs = hub.waiter(JOBS_CHANNEL, "default", start=False)
    outbox_waiter = hub.waiter(OUTBOX_CHANNEL, start=False)
    try:
        hub.start()
        assert outbox_waiter.wait(10) and outbox_waiter.resynced and not outbox_waiter.notified
        with connect(db_url) as c:
            [backend] = _listen_backends(c)
            assert JOBS_CHANNEL in backend["query"] and OUTBOX_CHANNEL in backend["query"]
            c.execute(f"NOTIFY {OUTBOX_CHANNEL}, ''")
        assert outbox_waiter.wait(10) and outbox_waiter.notified and not outbox_waiter.resynced
        assert jobs.wait(10) and jobs.resynced
        hub.stop()
        assert outbox_waiter.wait(0)  # woken by the stop
        assert not hub.connected.is_set()
    finally:
        jobs.close()
        outbox_waiter.close()
        hub.stop()
