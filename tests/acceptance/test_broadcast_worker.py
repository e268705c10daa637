"""A broadcast through the real worker (issue 27): an event published to a tenant of 1,050 members
reaches every member's inbox exactly once, in pages of 100 that the worker's slots take as jobs, while
another tenant's notification published after it is not held behind it; a worker SIGKILLed in the
middle of the broadcast and replaced changes nothing."""
import signal
import uuid

from opsboard import auth, outbox
from tests.conftest import connect, wait_for
from tests.integration.test_notifications_broadcast import members
from tests.support import broadcast


def n(c, sql, *args) -> int:
    return c.execute(sql, args).fetchone()["n"]


def test_a_broadcast_reaches_every_member_once_in_pages(db_url, start_worker):
    with connect(db_url) as c:
        big = auth.ensure_tenant(c, "broadcast")["id"]
        small = auth.ensure_tenant(c, "bystander")["id"]
        everyone = members(c, big, 1050)
        [bystander] = members(c, small, 1)
        # The product's default: two lanes (two pages written at once), a worker killed among them.
        ev = outbox.publish(c, broadcast.EVENT_LANES, 1, aggregate=("announcement", "b1"), tenant=big,
                            payload={"text": "maintenance tonight"})
    w1 = start_worker(db_url, "--queues", "default=4", "--id", "w1", OPSBOARD_LEASE_SECONDS="5")
    with connect(db_url) as c:
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM notifications WHERE event_id = %s", ev["id"]) >= 200,
                 timeout=60, message="the first pages")
        other = outbox.publish(c, broadcast.EVENT, 1, aggregate=("announcement", "s1"), tenant=small,
                               payload={"text": "hello"})
        w1.send_signal(signal.SIGKILL)
        w1.wait(10)
    start_worker(db_url, "--queues", "default=4", "--id", "w2", OPSBOARD_LEASE_SECONDS="5")
    with connect(db_url) as c:
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM notifications WHERE event_id = %s", ev["id"]) == 1050,
                 timeout=120, message="every member's inbox row")
        wait_for(lambda: n(c, "SELECT count(*) AS n FROM jobs WHERE type = 'notifications.fanout' "
                              "AND status <> 'succeeded'") == 0, timeout=60, message="every page job to finish")
        rows = c.execute("SELECT recipient_id, count(*) AS k FROM notifications WHERE event_id = %s "
                         "GROUP BY recipient_id", (ev["id"],)).fetchall()
        assert sorted(r["recipient_id"] for r in rows) == everyone and {r["k"] for r in rows} == {1}
        pages = c.execute("SELECT payload->>'after' AS after, attempts FROM jobs "
                          "WHERE type = 'notifications.fanout' AND event_id = %s", (ev["id"],)).fetchall()
        # The relay's first job, then one job per further page of 100 (10 of them), each once.
        assert len(pages) == 11
        assert sorted(uuid.UUID(p["after"]) for p in pages if p["after"]) == [everyone[i] for i in range(99, 1000, 100)]
        assert n(c, "SELECT count(*) AS n FROM deliveries WHERE event_id = %s AND channel = 'push'", ev["id"]) == 1050
        [mine] = c.execute("SELECT recipient_id FROM notifications WHERE event_id = %s", (other["id"],)).fetchall()
        assert mine["recipient_id"] == bystander
        assert n(c, "SELECT count(*) AS n FROM notifications WHERE recipient_id = ANY(%s)", everyone + [bystander]) \
            == 1051
