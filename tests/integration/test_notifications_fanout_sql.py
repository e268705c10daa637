"""The set-based fan-out: SQL rules agree with the pure reference, chunks change nothing."""
from __future__ import annotations

import uuid
from datetime import datetime, time, timedelta, timezone

from opsboard import outbox
from opsboard.notifications import fanout, policy, preferences, templates
from opsboard.outbox import EventField
from tests.integration.test_notifications import _deliveries, _notice, _user
from tests.conftest import CATALOGUE

WINDOWS = [
    ("Asia/Tehran", time(22, 0), time(7, 0), [1, 2, 3, 4, 5, 6, 7]),
    ("Asia/Tehran", time(22, 0), time(7, 0), [1]),            # over midnight, Mondays only
    ("Europe/Berlin", time(1, 30), time(3, 30), [7]),         # crosses the DST change of 2026-03-29
    ("America/New_York", time(12, 0), time(14, 0), []),       # empty: every day
    ("UTC", time(0, 0), time(23, 59), [6, 7]),
    ("Not/A_Zone", time(8, 0), time(9, 0), [1, 2, 3]),        # unknown zone: UTC
]


def test_sql_quiet_until_agrees_with_the_pure_reference(conn):
    start = datetime(2026, 3, 26, 0, 7, tzinfo=timezone.utc)
    nows = [start + timedelta(minutes=37 * i) for i in range(7 * 24 * 60 // 37)]
    for tz, begin, end, days in WINDOWS:
        rows = conn.execute(
            "SELECT n, opsboard_quiet_until(n, %s, %s, %s, %s::smallint[]) AS until FROM unnest(%s::timestamptz[]) n",
            (tz, begin, end, days, nows)).fetchall()
        got = {r["n"]: r["until"] for r in rows}
        inside = 0
        for now in nows:
            expected = preferences.quiet_until(now, tz, begin, end, days)
            assert got[now] == expected, (tz, begin, end, days, now)
            inside += expected is not None
        assert 0 < inside < len(nows)


outbox.define_event(CATALOGUE, "test_named.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a notice whose text names each recipient.")
policy.declare(CATALOGUE, "test_named.sent", category="ticket", channels=("inbox", "email"),
               recipients=lambda conn, event: event["payload"]["user_ids"], permission="tickets.view",
               variables=lambda conn, event, user_id: {"who": str(user_id)[-4:]})


outbox.define_event(CATALOGUE, "test_inbox_only.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a notice for the inbox alone.")
policy.declare(CATALOGUE, "test_inbox_only.sent", category="ticket", channels=("inbox",),
               recipients=lambda conn, event: event["payload"]["user_ids"])


def test_an_inbox_only_notification_writes_inbox_rows_alone_and_a_second_relay_adds_nothing(conn, tenant):
    """No deliveries row at all for a delivered inbox: the second relay finds the inbox rows themselves."""
    users = [_user(conn, tenant) for _ in range(3)]
    ev = outbox.publish(conn, "test_inbox_only.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                        payload={"user_ids": [str(u) for u in users]})
    assert fanout.fan_out(conn, ev["id"]) == {"recipients": 3, "inbox": 3, "deliveries": 3, "jobs": 0, "suppressed": 0}
    assert conn.execute("SELECT count(*) AS n FROM deliveries WHERE event_id = %s", (ev["id"],)).fetchone()["n"] == 0
    assert fanout.fan_out(conn, ev["id"]) == {"recipients": 3, "inbox": 0, "deliveries": 0, "jobs": 0, "suppressed": 0}
    assert set(_deliveries(conn, ev["id"])) == {(u, "inbox") for u in users}


def test_chunks_give_the_same_rows_and_a_second_relay_adds_nothing(conn, tenant, monkeypatch):
    monkeypatch.setattr(fanout, "CHUNK", 2)
    users = [_user(conn, tenant) for _ in range(4)]
    no_permission = _user(conn, tenant, "template_author")
    quiet = users[1]
    preferences.set_quiet_hours(conn, quiet, "UTC", time(0, 0), time(23, 59))
    now = datetime(2026, 6, 10, 12, 0, tzinfo=timezone.utc)
    ev = _notice(conn, tenant, users + [no_permission], now=now)
    first = fanout.fan_out(conn, ev["id"], now=now)
    # 5 recipients x 4 channels (inbox, push, email, sms); push: no device; sms: sensitive.
    assert first == {"recipients": 5, "inbox": 4, "deliveries": 20, "jobs": 4, "suppressed": 12}
    d = _deliveries(conn, ev["id"])
    assert all(d[(u, "email")]["status"] == "queued" for u in users)
    assert d[(quiet, "email")]["deferred_until"] == datetime(2026, 6, 10, 23, 59, tzinfo=timezone.utc)
    assert d[(users[0], "email")]["deferred_until"] is None
    assert d[(no_permission, "inbox")]["suppression_reason"] == "permission"
    assert {d[(u, "push")]["suppression_reason"] for u in users} == {"unreachable"}
    inbox_ids = {r["recipient_id"]: r["id"] for r in conn.execute(
        "SELECT id, recipient_id FROM notifications WHERE event_id = %s", (ev["id"],)).fetchall()}
    assert set(inbox_ids) == set(users)
    assert all(d[(u, ch)]["notification_id"] == inbox_ids[u] for u in users for ch in ("inbox", "email"))
    jobs = conn.execute("SELECT id, idempotency_key, available_at, payload FROM jobs WHERE event_id = %s",
                        (ev["id"],)).fetchall()
    assert {j["id"] for j in jobs} == {d[(u, "email")]["id"] for u in users}
    # One job per delivery by its id (the delivery's): no idempotency key, no index entry for one (0055).
    assert all(j["idempotency_key"] is None and j["payload"] == {"delivery_id": str(j["id"])} for j in jobs)
    assert all(d[(no_permission, ch)]["notification_id"] is None for ch in ("inbox", "email"))
    # The inbox rows are their inbox deliveries: the table holds only the suppressed one (0056).
    assert [(r["recipient_id"], r["status"]) for r in conn.execute(
        "SELECT recipient_id, status FROM deliveries WHERE event_id = %s AND channel = 'inbox'", (ev["id"],))] \
        == [(no_permission, "suppressed")]
    assert all(d[(u, "inbox")]["id"] == inbox_ids[u] and d[(u, "inbox")]["status"] == "delivered" for u in users)
    second = fanout.fan_out(conn, ev["id"], now=now)
    assert second == {"recipients": 5, "inbox": 0, "deliveries": 0, "jobs": 0, "suppressed": 0}


def test_per_user_variables_render_each_recipients_own_text_across_chunks(conn, tenant, monkeypatch):
    monkeypatch.setattr(fanout, "CHUNK", 2)
    templates.seed(conn, "test_named.sent", "inbox", "fa", "برای {{ who }}", "متن {{ who }}", "who", {"who": "x"})
    templates.seed(conn, "test_named.sent", "inbox", "en", "For {{ who }}", "Text {{ who }}", "who", {"who": "x"})
    users = [_user(conn, tenant, locale=loc) for loc in ("en", "fa", None)]
    ev = outbox.publish(conn, "test_named.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                        payload={"user_ids": [str(u) for u in users]})
    assert fanout.fan_out(conn, ev["id"])["inbox"] == 3
    rows = {r["recipient_id"]: r for r in conn.execute(
        "SELECT recipient_id, title, locale, template_version FROM notifications WHERE event_id = %s",
        (ev["id"],)).fetchall()}
    en, fa, unset = users
    assert rows[en]["title"] == f"For {str(en)[-4:]}" and rows[en]["locale"] == "en"
    assert rows[fa]["title"] == f"برای {str(fa)[-4:]}" and rows[fa]["locale"] == "fa"
    assert rows[unset]["locale"] == "fa" and rows[unset]["template_version"] == 1   # tenant default: fa


def test_an_inbox_row_written_with_its_own_inbox_delivery_row_shows_one_inbox_delivery(conn, tenant):
    """Rows of before 0056 (and of the previous release's workers in a rolling upgrade) have an 'inbox'
    deliveries row beside the inbox row: notification_deliveries and the inbox API show it once."""
    from opsboard.notifications import inbox
    [user] = [_user(conn, tenant)]
    ev = _notice(conn, tenant, [user])
    nid = uuid.uuid4()
    conn.execute("INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, "
                 "template_key, locale, title, body) VALUES (%s, %s, %s, %s, %s, 'ticket', 'x', 'fa', 't', 'b')",
                 (nid, tenant["id"], user, ev["id"], ev["type"]))
    conn.execute("INSERT INTO deliveries (id, tenant_id, recipient_id, event_id, event_type, notification_id, "
                 "channel, status) VALUES (%s, %s, %s, %s, %s, %s, 'inbox', 'delivered')",
                 (uuid.uuid4(), tenant["id"], user, ev["id"], ev["type"], nid))
    rows = conn.execute("SELECT channel, status FROM notification_deliveries WHERE event_id = %s",
                        (ev["id"],)).fetchall()
    assert [(r["channel"], r["status"]) for r in rows] == [("inbox", "delivered")]
    assert inbox.get(conn, user, nid)["deliveries"] == {"inbox": "delivered"}
