"""Digests (issue 43, opsboard.notifications.digest) on the real database: a window, a schedule in the
recipient's time zone, a key from the payload, quiet hours collected into one digest, critical
notifications never collected, the inbox keeping every item, and exactly one digest per window when two
flushes or two fan-outs run at once."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, time, timedelta, timezone

import pytest

from opsboard import auth, outbox
from opsboard.notifications import digest, fanout, handlers, policy, preferences
from tests.conftest import CATALOGUE, connect
from tests.support import digests as events

events.register(CATALOGUE)

T0 = datetime(2026, 6, 10, 10, 0, tzinfo=timezone.utc)      # 13:30 in Tehran


class Job:
    """What a handler sees of a job (the test's own real connection); the worker's executor is exercised by
    tests/journeys/test_journey_digest.py."""

    def __init__(self, conn, payload, tenant_id):
        self.payload, self.tenant_id, self._conn = payload, tenant_id, conn
        self.group_key = self.settings = self.correlation_id = None

    def connection(self):
        conn = self._conn

        class _Ctx:
            def __enter__(self):
                return conn

            def __exit__(self, *exc):
                return False
        return _Ctx()


def _user(conn, tenant, *, locale="fa", time_zone=None):
    u = auth.create_user(conn, f"d-{uuid.uuid4().hex[:8]}@example.test", "correct horse battery", "member",
                         tenant["slug"])
    preferences.set_profile(conn, u["id"], locale=locale, phone="+98912" + str(uuid.uuid4().int % 10**7).zfill(7),
                            time_zone=time_zone)
    return u["id"]


def _send(conn, tenant, kind, user_ids, title, now, **payload):
    ev = outbox.publish(conn, kind, 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                        payload={"user_ids": [str(u) for u in user_ids], "title": title, **payload}, now=now)
    return ev, fanout.fan_out(conn, ev["id"], now=now)


def _rows(conn, uid, channel="email"):
    return conn.execute("SELECT * FROM deliveries WHERE recipient_id = %s AND channel = %s ORDER BY created_at, id",
                        (uid, channel)).fetchall()


def _digests(conn, uid, channel="email"):
    return conn.execute("SELECT * FROM notification_digests WHERE recipient_id = %s AND channel = %s "
                        "ORDER BY opened_at, id", (uid, channel)).fetchall()


def _flush(conn, tenant, head_id):
    return handlers.deliver(Job(conn, {"delivery_id": str(head_id)}, tenant["id"]))


def _emails(conn, tenant):
    return conn.execute("SELECT params FROM outbound_messages WHERE tenant_id = %s AND channel = 'email' "
                        "ORDER BY created_at", (tenant["id"],)).fetchall()


def test_a_window_collects_items_into_one_send_and_the_inbox_keeps_them_all(conn, tenant):
    uid = _user(conn, tenant, locale="en")
    for i, minute in enumerate((0, 3, 7)):
        _send(conn, tenant, "test.digest_window", [uid], f"item {i + 1}", T0 + timedelta(minutes=minute))
    rows = _rows(conn, uid)
    head = rows[0]
    # The first item opens the digest: its delivery is queued with its job at the window's end.
    assert head["status"] == "queued" and head["digest_id"] == head["id"]
    assert head["deferred_until"] == T0 + timedelta(minutes=10)
    job = conn.execute("SELECT type, available_at FROM jobs WHERE id = %s", (head["job_id"],)).fetchone()
    assert job == {"type": "notifications.deliver", "available_at": T0 + timedelta(minutes=10)}
    # The others are counted in it, without a job of their own.
    assert [(r["status"], r["digest_id"], r["job_id"]) for r in rows[1:]] == [("digested", head["id"], None)] * 2
    (g,) = _digests(conn, uid)
    assert (g["id"], g["status"], g["item_count"], g["kind"]) == (head["id"], "open", 3, "window")
    # SMS the same, a digest of its own; the inbox keeps every item as it came.
    assert [r["status"] for r in _rows(conn, uid, "sms")] == ["queued", "digested", "digested"]
    inbox = conn.execute("SELECT title FROM notifications WHERE recipient_id = %s ORDER BY seq", (uid,)).fetchall()
    assert [r["title"] for r in inbox] == ["item 1", "item 2", "item 3"]

    # The flush: one email with the count and the first and last items.
    assert _flush(conn, tenant, head["id"]) is None
    (mail,) = _emails(conn, tenant)
    assert mail["params"]["subject"].startswith("3 new notifications")
    assert "item 1" in mail["params"]["text"] and "item 3" in mail["params"]["text"]
    assert "item 2" not in mail["params"]["text"]
    (g,) = _digests(conn, uid)
    assert g["status"] == "closed" and g["closed_at"] is not None
    # Running the flush again sends nothing more.
    _flush(conn, tenant, head["id"])
    assert len(_emails(conn, tenant)) == 1

    # An item after the flush opens the next window.
    _send(conn, tenant, "test.digest_window", [uid], "item 4", T0 + timedelta(minutes=12))
    later = _digests(conn, uid)
    assert [(x["status"], x["item_count"]) for x in later] == [("closed", 3), ("open", 1)]
    assert _rows(conn, uid)[-1]["deferred_until"] == T0 + timedelta(minutes=22)


def test_one_item_in_a_window_is_sent_as_itself(conn, tenant):
    uid = _user(conn, tenant, locale="en")
    _send(conn, tenant, "test.digest_window", [uid], "alone", T0)
    (head,) = _rows(conn, uid)
    _flush(conn, tenant, head["id"])
    (mail,) = _emails(conn, tenant)
    assert mail["params"]["subject"] == "alone"


def test_a_daily_schedule_is_in_the_recipients_time_zone_with_a_jalali_day_in_fa(conn, tenant):
    tehran = _user(conn, tenant, locale="fa", time_zone="Asia/Tehran")
    utc = _user(conn, tenant, locale="en", time_zone="UTC")
    _send(conn, tenant, "test.digest_daily", [tehran, utc], "first", T0)
    _send(conn, tenant, "test.digest_daily", [tehran, utc], "second", T0 + timedelta(hours=2))
    # 13:30 in Tehran: the next 09:00 there is tomorrow 05:30 UTC; in UTC, tomorrow 09:00.
    assert _rows(conn, tehran)[0]["deferred_until"] == datetime(2026, 6, 11, 5, 30, tzinfo=timezone.utc)
    assert _rows(conn, utc)[0]["deferred_until"] == datetime(2026, 6, 11, 9, 0, tzinfo=timezone.utc)
    # The pure rule says the same.
    assert digest.flush_at(T0, "schedule", at=time(9, 0), time_zone="Asia/Tehran") == \
        datetime(2026, 6, 11, 5, 30, tzinfo=timezone.utc)
    _flush(conn, tenant, _rows(conn, tehran)[0]["id"])
    (mail,) = _emails(conn, tenant)
    # fa: Persian digits and the Jalali calendar, the day the digest was sent in Tehran.
    day = digest.variables({**_digests(conn, tehran)[0], "time_zone": "Asia/Tehran", "first_event_type": "",
                            "last_event_type": ""}, ["fa"])["day"]
    assert mail["params"]["subject"] == f"۲ اعلان تازه — {day}"
    assert digest.variables({"closed_at": datetime(2026, 6, 11, 5, 30, tzinfo=timezone.utc), "flush_at": None,
                             "time_zone": "Asia/Tehran", "item_count": 2, "first_title": "a", "last_title": "b",
                             "first_event_type": "", "last_event_type": "", "category": "ticket"},
                            ["fa", "en"])["day"] == "۱۴۰۵/۰۳/۲۱"


def test_a_payload_field_keys_separate_digests(conn, tenant):
    uid = _user(conn, tenant)
    for thread in ("a", "b", "a", "a", "b"):
        _send(conn, tenant, "test.digest_keyed", [uid], f"on {thread}", T0, thread=thread)
    assert sorted((g["digest_key"], g["item_count"]) for g in _digests(conn, uid)) == [("a", 3), ("b", 2)]
    assert [r["status"] for r in _rows(conn, uid)].count("queued") == 2


def test_quiet_hours_collect_into_one_digest_at_the_window_end(conn, tenant):
    uid = _user(conn, tenant, time_zone="Asia/Tehran")
    preferences.set_quiet_hours(conn, uid, "Asia/Tehran", time(22, 0), time(7, 0))
    night = datetime(2026, 6, 10, 20, 0, tzinfo=timezone.utc)       # 23:30 in Tehran
    end = datetime(2026, 6, 11, 3, 30, tzinfo=timezone.utc)         # 07:00 in Tehran
    for i in range(4):
        _send(conn, tenant, "test.digest_plain", [uid], f"night {i}", night + timedelta(minutes=20 * i))
    rows = _rows(conn, uid)
    assert [r["status"] for r in rows] == ["queued", "digested", "digested", "digested"]
    assert rows[0]["deferred_until"] == end
    (g,) = _digests(conn, uid)
    assert (g["kind"], g["item_count"], g["flush_at"]) == ("quiet", 4, end)
    assert conn.execute("SELECT count(*) AS n FROM notifications WHERE recipient_id = %s", (uid,)).fetchone()["n"] == 4
    # By day, without quiet hours, a policy without a digest sends each item.
    _send(conn, tenant, "test.digest_plain", [uid], "day", datetime(2026, 6, 11, 8, 0, tzinfo=timezone.utc))
    day = _rows(conn, uid)[-1]
    assert (day["status"], day["digest_id"], day["deferred_until"]) == ("queued", None, None)
    # The pure rule: the same decision for one recipient.
    facts = policy.RecipientFacts(True, True, {}, quiet_until=end, time_zone="Asia/Tehran", now=night)
    pol = policy.policy_for("test.digest_plain")
    assert policy.check(pol, "email", facts) == policy.Decision("deferred", "quiet_hours", end, False, "quiet")
    assert policy.check(pol, "inbox", facts).status == "queued"


def test_critical_notifications_never_wait_in_a_digest(conn, tenant):
    uid = _user(conn, tenant)
    preferences.set_quiet_hours(conn, uid, "UTC", time(0, 0), time(23, 59))
    for i in range(3):
        _send(conn, tenant, "test.digest_critical", [uid], f"sign-in {i}", T0)
    rows = _rows(conn, uid)
    assert [(r["status"], r["digest_id"], r["deferred_until"]) for r in rows] == [("queued", None, None)] * 3
    assert _digests(conn, uid) == []
    pol = policy.policy_for("test.digest_critical")
    assert policy.digest_kind(pol, "email", T0) is None
    with pytest.raises(ValueError, match="critical"):
        policy.declare(CATALOGUE, "test.digest_critical", category="security", channels=("inbox", "email"),
                       recipients=events._recipients, digest=digest.window(minutes=5))


def test_two_flushes_at_once_send_one_digest(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "digest-race")
        uid = _user(c, t, locale="en")
        for i in range(3):
            _send(c, t, "test.digest_window", [uid], f"race {i}", T0 + timedelta(minutes=i))
        head = _rows(c, uid)[0]
    # a flushes inside an open transaction (digest closed and handed over, not committed); b runs meanwhile
    # and waits for a's lock on the digest, then finds it handed over.
    a = connect(db_url)
    a.execute("BEGIN")
    assert _flush(a, t, head["id"]) is None
    result: dict = {}

    def flush_b():
        try:
            with connect(db_url) as b, b.transaction():
                result["outcome"] = _flush(b, t, head["id"])
        except Exception as exc:  # noqa: BLE001 -- the test reports it
            result["error"] = exc
    th = threading.Thread(target=flush_b)
    th.start()
    with connect(db_url) as c:
        from tests.conftest import wait_for
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND wait_event_type = 'Lock' AND state = 'active'").fetchone()["n"],
                 timeout=10, message="the second flush waiting for the first")
    a.execute("COMMIT")
    a.close()
    th.join(10)
    assert "error" not in result, result.get("error")
    with connect(db_url) as c:
        assert len(_emails(c, t)) == 1
        (g,) = _digests(c, uid)
        assert (g["status"], g["item_count"]) == ("closed", 3)


def test_two_fan_outs_at_once_count_into_one_open_digest(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "digest-fanouts")
        users = [_user(c, t) for _ in range(20)]
        evs = [outbox.publish(c, "test.digest_window", 1, aggregate=("notice", uuid.uuid4().hex), tenant=t["id"],
                              payload={"user_ids": [str(u) for u in (users if i == 0 else users[::-1])],
                                       "title": f"e{i}"}) for i in range(2)]
    errors: list = []
    barrier = threading.Barrier(2)

    def run(ev):
        try:
            with connect(db_url) as c:
                barrier.wait(5)
                fanout.fan_out(c, ev["id"])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(ev,)) for ev in evs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == []
    with connect(db_url) as c:
        for uid in users:
            (g,) = _digests(c, uid)
            assert (g["status"], g["item_count"]) == ("open", 2)
            assert sorted(r["status"] for r in _rows(c, uid)) == ["digested", "queued"]
