"""How the relay is woken (migration 0017, worker/services/relay.py): a producer's
session notifies at most once per ``opsboard.outbox_notify_interval_ms``, checked
at commit; the relay comes on the notification, and an event whose notification
was suppressed is still relayed without waiting for the slow fallback poll."""
import threading
from contextlib import contextmanager

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from opsboard import db, pgnotify
from opsboard.tools import demo_domain
from tests.conftest import connect, wait_for
from worker.services.relay import CHANNEL, Relay, RelayConfig

HOUR = 3600.0


def _notifications(listener) -> int:
    return sum(1 for _ in listener.notifies(timeout=0.5))


def _relayed(c, event_id) -> bool:
    return c.execute("SELECT relayed_at IS NOT NULL AS done FROM outbox_events WHERE id = %s",
                     (event_id,)).fetchone()["done"]


@contextmanager
def _relay_running(url, **config):
    stopping = threading.Event()
    hub = pgnotify.Hub(url, poll=0.2, name="test-relay-hub")
    with ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True, "row_factory": dict_row,
                                                             "options": db.SESSION_OPTIONS}) as pool:
        t = threading.Thread(target=Relay(RelayConfig(**config)).loop, args=(hub, pool, stopping), daemon=True)
        t.start()
        try:
            yield
        finally:
            stopping.set()
            hub.stop()  # wakes its waiters: the relay leaves its hour-long wait
            t.join(30)
            assert not t.is_alive()


def test_a_session_notifies_once_per_interval_at_commit_and_a_rollback_does_not_count(db_url, make_tenant):
    with connect(db_url) as listener, connect(db_url) as a, connect(db_url) as b:
        listener.execute(f"LISTEN {CHANNEL}")
        tenant = make_tenant(a)
        a.execute("SET opsboard.outbox_notify_interval_ms = 3600000")
        demo_domain.sign_up_user(a, tenant["id"], "one@example.test")
        assert _notifications(listener) == 1
        for _ in range(3):  # the same session, within the interval: no NOTIFY, no notify lock
            demo_domain.sign_up_user(a, tenant["id"], "more@example.test")
        assert _notifications(listener) == 0
        demo_domain.sign_up_user(b, tenant["id"], "other@example.test")  # another session notifies
        assert _notifications(listener) == 1
        # A transaction that inserted events and rolled back neither notified nor counts as notified.
        with connect(db_url) as c:
            c.execute("SET opsboard.outbox_notify_interval_ms = 3600000")
            with c.transaction(force_rollback=True):
                demo_domain.sign_up_user(c, tenant["id"], "gone@example.test")
            assert _notifications(listener) == 0
            demo_domain.sign_up_user(c, tenant["id"], "kept@example.test")
            assert _notifications(listener) == 1
        # Many events in one transaction: one notification.
        b.execute("SET opsboard.outbox_notify_interval_ms = 0")
        with b.transaction():
            for _ in range(5):
                demo_domain.sign_up_user(b, tenant["id"], "bulk@example.test")
        assert _notifications(listener) == 1


def test_a_published_event_is_relayed_on_its_notification_not_the_fallback_poll(db_url, make_tenant):
    with connect(db_url) as c, _relay_running(db_url, poll_interval=HOUR, active_window=0):
        tenant = make_tenant(c)
        for i in range(3):  # each from a fresh session: each notifies
            with connect(db_url) as producer:
                event = demo_domain.sign_up_user(producer, tenant["id"], f"u{i}@example.test")["event"]
            wait_for(lambda: _relayed(c, event["id"]), timeout=30, message="the notified event relayed")


def test_an_event_whose_notification_was_suppressed_is_relayed_without_the_fallback_poll(db_url, make_tenant):
    with connect(db_url) as c, connect(db_url) as listener, connect(db_url) as producer, \
            _relay_running(db_url, poll_interval=HOUR, active_window=60):
        listener.execute(f"LISTEN {CHANNEL}")
        tenant = make_tenant(c)
        producer.execute("SET opsboard.outbox_notify_interval_ms = 3600000")
        first = demo_domain.sign_up_user(producer, tenant["id"], "first@example.test")["event"]
        wait_for(lambda: _relayed(c, first["id"]), timeout=30, message="the first event relayed")
        # The relay has drained and waits; this commit sends no notification (the race) ...
        later = [demo_domain.sign_up_user(producer, tenant["id"], f"n{i}@example.test")["event"] for i in range(3)]
        assert _notifications(listener) == 1  # the first event's only
        # ... and is relayed all the same, long before the hour-long fallback poll.
        wait_for(lambda: all(_relayed(c, e["id"]) for e in later), timeout=30, message="the later events relayed")
