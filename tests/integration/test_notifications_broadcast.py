"""A broadcast (a policy with an audience) fans out one page per job (issue 27).

``test.announced`` (tests/support/broadcast.py) notifies every active member of the event's tenant in
pages of 100: each ``notifications.fanout`` job reads one page by keyset, enqueues the next page's job
first, then writes that page's inbox rows and deliveries in its own transaction.  Nothing is missed or
doubled when a page runs twice, pages are independent of each other, and no other tenant's member is
ever in the audience.
"""
from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from opsboard import auth, jobqueue, jobtypes, outbox
from opsboard.notifications import fanout, policy
from tests.conftest import connect, wait_for
from tests.support import broadcast


def members(conn, tenant_id, n: int, *, active: bool = True) -> list[uuid.UUID]:
    """``n`` users who are members of ``tenant_id`` (inserted in bulk: no password hashing)."""
    rows = conn.execute(
        "WITH u AS (INSERT INTO users (id, email, password_hash) "
        "  SELECT gen_random_uuid(), 'm' || i || '-' || %s || '@example.test', 'x' FROM generate_series(1, %s) i "
        "  RETURNING id) "
        "INSERT INTO memberships (user_id, tenant_id, role, active) SELECT id, %s, 'ops', %s FROM u RETURNING user_id",
        (uuid.uuid4().hex[:8], n, tenant_id, active)).fetchall()
    return sorted(r["user_id"] for r in rows)


def announce(conn, tenant_id) -> dict:
    return outbox.publish(conn, broadcast.EVENT, 1, aggregate=("announcement", "a1"), tenant=tenant_id,
                          payload={"text": "maintenance tonight"})


def page_jobs(conn, event_id) -> list[dict]:
    return conn.execute("SELECT * FROM jobs WHERE type = 'notifications.fanout' AND event_id = %s "
                        "AND payload ? 'after' ORDER BY payload->>'after'", (event_id,)).fetchall()


def inbox(conn, event_id) -> list[uuid.UUID]:
    return [r["recipient_id"] for r in conn.execute(
        "SELECT recipient_id FROM notifications WHERE event_id = %s ORDER BY recipient_id", (event_id,)).fetchall()]


def test_pages_chain_through_the_audience_once(conn):
    t = auth.ensure_tenant(conn, f"b-{uuid.uuid4().hex[:8]}")["id"]
    other = auth.ensure_tenant(conn, f"o-{uuid.uuid4().hex[:8]}")["id"]
    everyone = members(conn, t, 250)
    members(conn, t, 5, active=False)          # former members: not in the audience
    members(conn, other, 30)                   # another tenant's: never
    ev = announce(conn, t)

    first = fanout.fan_out(conn, ev["id"])
    assert first["recipients"] == 100 and first["next_after"] == str(everyone[99])
    [job] = page_jobs(conn, ev["id"])
    assert job["payload"] == {"event_id": str(ev["id"]), "after": str(everyone[99])}
    assert job["tenant_id"] == t and job["status"] == "pending"
    # The page runs again (its worker died before recording success): nothing new, the same next job.
    again = fanout.fan_out(conn, ev["id"])
    assert again["inbox"] == 0 and again["next_after"] == first["next_after"]
    assert len(page_jobs(conn, ev["id"])) == 1

    second = fanout.fan_out(conn, ev["id"], after=uuid.UUID(first["next_after"]))
    third = fanout.fan_out(conn, ev["id"], after=uuid.UUID(second["next_after"]))
    assert (second["recipients"], third["recipients"]) == (100, 50) and "next_after" not in third
    assert len(page_jobs(conn, ev["id"])) == 2
    assert inbox(conn, ev["id"]) == everyone
    # Every recipient has exactly one delivery per channel (push: no device, so suppressed).
    per_channel = conn.execute("SELECT channel, count(*) AS n, count(DISTINCT recipient_id) AS d FROM notification_deliveries "
                               "WHERE event_id = %s GROUP BY channel ORDER BY channel", (ev["id"],)).fetchall()
    assert [(r["channel"], r["n"], r["d"]) for r in per_channel] == [("inbox", 250, 250), ("push", 250, 250)]


def test_lanes_enqueue_the_next_page_before_writing_in_the_next_lanes_group(db_url):
    """Two lanes: a page's next page is committed (in the next lane's job group) before the page writes,
    so that another slot takes it meanwhile; a lane runs one page at a time; every member once."""
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, f"b-{uuid.uuid4().hex[:8]}")["id"]
        everyone = members(c, t, 250)
        ev = outbox.publish(c, broadcast.EVENT_LANES, 1, aggregate=("announcement", "l1"), tenant=t,
                            payload={"text": "maintenance tonight"})
        # The first page's writes fail (another writer's uncommitted inbox row of a member: its inbox
        # insert waits, then its unique key refuses it): its next page, committed before, stays.
        c.execute("BEGIN")
        c.execute("INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, "
                  "template_key, locale, title, body) VALUES (gen_random_uuid(), %s, %s, %s, 'x', 'system', 'x', "
                  "'fa', 't', 'b')", (t, everyone[5], ev["id"]))
        result: dict = {}

        def first_page():
            try:
                with connect(db_url) as other:
                    fanout.fan_out(other, ev["id"])
            except psycopg.Error as exc:
                result["error"] = exc
        th = threading.Thread(target=first_page)
        th.start()
        with connect(db_url) as watch:
            wait_for(lambda: watch.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = "
                                           "current_database() AND wait_event_type = 'Lock'").fetchone()["n"],
                     timeout=10, message="the first page waiting on the uncommitted row")
        c.execute("COMMIT")
        th.join(10)
        assert isinstance(result.get("error"), psycopg.errors.UniqueViolation)
        [second] = page_jobs(c, ev["id"])
        assert second["group_key"] == fanout.lane_group(ev["id"], 1) and second["payload"]["after"] == str(everyone[99])
        c.execute("DELETE FROM notifications WHERE event_id = %s", (ev["id"],))
        first = fanout.fan_out(c, ev["id"])
        assert first["inbox"] == 100
        two = fanout.fan_out(c, ev["id"], after=uuid.UUID(first["next_after"]), lane=fanout.lane_of(second["group_key"]))
        jobs = page_jobs(c, ev["id"])
        assert [j["group_key"] for j in jobs] == [fanout.lane_group(ev["id"], 1), fanout.lane_group(ev["id"], 0)]
        fanout.fan_out(c, ev["id"], after=uuid.UUID(two["next_after"]), lane=0)
        assert inbox(c, ev["id"]) == everyone


def test_the_relay_starts_the_first_page_and_pages_are_valid_jobs(conn):
    t = auth.ensure_tenant(conn, f"b-{uuid.uuid4().hex[:8]}")["id"]
    members(conn, t, 3)
    ev = announce(conn, t)
    outbox.relay.relay_events(conn)
    [first] = conn.execute("SELECT * FROM jobs WHERE type = 'notifications.fanout' AND event_id = %s",
                           (ev["id"],)).fetchall()
    assert first["payload"] == {"event_id": str(ev["id"])}
    # A page job's "after" is a typed field: a malformed one is refused at enqueue.
    with pytest.raises(jobtypes.InvalidPayload):
        jobqueue.enqueue(conn, "notifications.fanout", {"event_id": str(ev["id"]), "after": "not-a-uuid"}, tenant=t)


def test_an_audience_or_recipients_but_not_both(conn):
    from opsboard.catalogue import active
    with pytest.raises(ValueError):
        policy.declare(active(), broadcast.EVENT, category="system", channels=("inbox",),
                       recipients=lambda c, e: [], audience=policy.tenant_members())
    with pytest.raises(ValueError):
        policy.declare(active(), broadcast.EVENT, category="system", channels=("inbox",))
    with pytest.raises(ValueError):
        policy.tenant_members(page_size=0)
