"""Notifications on a real database: fan-out, policy rules in order, templates, inbox cursor."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, time, timedelta, timezone

import psycopg
import pytest

from opsboard import auth, db, outbox
from opsboard.audit import Actor
from opsboard.errors import OpsError
from opsboard.notifications import fanout, inbox, policy, preferences, templates
from opsboard.outbox import EventField
from opsboard.tools import demo_domain
from tests.conftest import CATALOGUE, connect, wait_for
from opsboard.notifications import handlers

AUTHOR = Actor(label="author@example.test")

outbox.define_event(CATALOGUE, "test_notice.sent", 1, aggregate="notice",
                    fields={"user_ids": EventField(list), "text": EventField(str, required=False)},
                    description="Test-only: a notice to the listed users.")


def _recipients(conn, event):
    return event["payload"]["user_ids"]


policy.declare(CATALOGUE, "test_notice.sent", category="ticket", sensitivity="sensitive",
               channels=("inbox", "push", "email", "sms"), recipients=_recipients, permission="tickets.view",
               template="test_notice.sent")


outbox.define_event(CATALOGUE, "test_payment.sent", 1, aggregate="notice",
                    fields={"user_ids": EventField(list)}, description="Test-only: sensitive, SMS-approved.")
policy.declare(CATALOGUE, "test_payment.sent", category="financial", sensitivity="sensitive",
               channels=("inbox", "push", "sms"), recipients=_recipients, permission="tickets.view",
               template="test_payment.sent")


def _user(conn, tenant, role="support_agent", *, email=None, phone="+989121234567", locale=None):
    u = auth.create_user(conn, email or f"u-{uuid.uuid4().hex[:8]}@example.test", "correct horse battery", role,
                         tenant["slug"])
    preferences.set_profile(conn, u["id"], locale=locale, phone=phone)
    return u["id"]


def _notice(conn, tenant, user_ids, now=None):
    return outbox.publish(conn, "test_notice.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                          payload={"user_ids": [str(u) for u in user_ids]}, now=now)


def _deliveries(conn, event_id):
    return {(r["recipient_id"], r["channel"]): r for r in
            conn.execute("SELECT * FROM notification_deliveries WHERE event_id = %s", (event_id,)).fetchall()}


class JobStub:
    """What a handler sees of a job: payload, tenant and a connection (the test's own, real)."""

    def __init__(self, conn, payload, tenant_id):
        self.payload, self.tenant_id, self._conn = payload, tenant_id, conn
        self.group_key = None   # a relayed first page has no lane group

    def connection(self):
        conn = self._conn

        class _Ctx:
            def __enter__(self):
                return conn

            def __exit__(self, *exc):
                return False
        return _Ctx()


def test_event_relayed_twice_makes_one_inbox_row_and_one_delivery_per_channel(conn, tenant):
    uid = _user(conn, tenant)
    ev = _notice(conn, tenant, [uid])
    first = fanout.fan_out(conn, ev["id"])
    second = fanout.fan_out(conn, ev["id"])
    assert first["inbox"] == 1 and first["deliveries"] == 4
    assert second == {"recipients": 1, "inbox": 0, "deliveries": 0, "jobs": 0, "suppressed": 0}
    assert conn.execute("SELECT count(*) AS n FROM notifications WHERE event_id = %s", (ev["id"],)).fetchone()["n"] == 1
    assert len(_deliveries(conn, ev["id"])) == 4
    jobs = conn.execute("SELECT count(*) AS n FROM jobs WHERE event_id = %s AND type = 'notifications.deliver'",
                        (ev["id"],)).fetchone()["n"]
    assert jobs == first["jobs"]


def test_the_relay_routes_demo_events_to_the_fanout_job(conn, tenant):
    from worker.services.relay import Relay
    auth.create_user(conn, f"a-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", "admin", tenant["slug"])
    out = demo_domain.sign_up_user(conn, tenant["id"], f"x-{uuid.uuid4().hex[:6]}@example.org")
    Relay().run_once(conn)
    job = conn.execute("SELECT * FROM jobs WHERE event_id = %s AND type = 'notifications.fanout'",
                       (out["event"]["id"],)).fetchone()
    assert job is not None and job["payload"] == {"event_id": str(out["event"]["id"])}
    handlers.fanout(JobStub(conn, job["payload"], tenant["id"]))
    handlers.fanout(JobStub(conn, job["payload"], tenant["id"]))  # a second run (relayed twice) adds nothing
    rows = conn.execute("SELECT * FROM notifications WHERE event_id = %s", (out["event"]["id"],)).fetchall()
    assert len(rows) == 1 and rows[0]["category"] == "account"


def test_each_suppression_rule_in_order_with_its_reason(conn, tenant, make_tenant):
    other = make_tenant(conn)
    ok = _user(conn, tenant)
    no_permission = _user(conn, tenant, "template_author")          # holds no tickets.view
    outsider = _user(conn, other)                                    # no membership here at all
    inactive = _user(conn, tenant)
    conn.execute("UPDATE memberships SET active = false WHERE user_id = %s", (inactive,))
    opted_out = _user(conn, tenant)
    preferences.set_preference(conn, tenant["id"], opted_out, "ticket", "email", False)
    no_phone = _user(conn, tenant, phone=None)
    ev = _notice(conn, tenant, [ok, no_permission, outsider, inactive, opted_out, no_phone])
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])
    assert d[(no_permission, "inbox")]["suppression_reason"] == "permission"
    assert d[(outsider, "email")]["suppression_reason"] == "permission"
    # An inactive membership still grants the role's permission: the next rule says why.
    assert d[(inactive, "inbox")]["suppression_reason"] == "membership"
    assert d[(opted_out, "email")]["suppression_reason"] == "preference"
    assert d[(opted_out, "inbox")]["status"] == "delivered"
    assert d[(no_phone, "sms")]["suppression_reason"] == "unreachable"
    # Sensitive content, category not approved for SMS: no SMS; push goes generic.
    assert d[(ok, "sms")]["suppression_reason"] == "sensitivity"
    assert d[(ok, "email")]["status"] == "queued" and d[(ok, "email")]["job_id"] is not None
    assert d[(ok, "inbox")]["status"] == "delivered"
    assert conn.execute("SELECT count(*) AS n FROM notifications WHERE event_id = %s",
                        (ev["id"],)).fetchone()["n"] == 3   # ok, opted_out, no_phone


def test_a_member_of_an_operator_tenant_holds_the_permission_in_every_tenant(conn, tenant, make_tenant):
    """The policy statement reads a recipient's memberships of this tenant and of every operator tenant
    (one range of memberships_pkey, filtered); a membership of another ordinary tenant grants nothing."""
    ops = make_tenant(conn, is_operator=True)
    ordinary = make_tenant(conn)
    operator_agent = _user(conn, ops)                     # support_agent of the operator tenant: tickets.view
    operator_author = _user(conn, ops, "template_author")  # no tickets.view anywhere
    elsewhere = _user(conn, ordinary)                      # support_agent, but of another tenant
    ev = _notice(conn, tenant, [operator_agent, operator_author, elsewhere])
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])
    assert d[(operator_agent, "inbox")]["status"] == "delivered"
    assert d[(operator_agent, "email")]["status"] == "queued"
    assert d[(operator_author, "inbox")]["suppression_reason"] == "permission"
    assert d[(elsewhere, "inbox")]["suppression_reason"] == "permission"


def test_a_sensitive_push_is_generic_even_when_the_category_may_go_by_sms(conn, tenant):
    uid = _user(conn, tenant)
    conn.execute("INSERT INTO push_subscriptions (id, tenant_id, user_ref, endpoint, p256dh, auth) "
                 "VALUES (gen_random_uuid(), %s, %s, 'https://push.example.test/x', 'BExample', 'secret')",
                 (tenant["id"], str(uid)))
    ev = outbox.publish(conn, "test_payment.sent", 1, aggregate=("notice", uuid.uuid4().hex), tenant=tenant["id"],
                        payload={"user_ids": [str(uid)]})
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])
    assert d[(uid, "sms")]["status"] == "queued"             # financial: SMS-approved
    assert d[(uid, "push")]["status"] == "queued" and d[(uid, "push")]["generic"] is True


def test_tenant_default_preference_and_user_override(conn, tenant):
    a, b = _user(conn, tenant), _user(conn, tenant)
    preferences.set_preference(conn, tenant["id"], None, "ticket", "email", False)
    preferences.set_preference(conn, tenant["id"], b, "ticket", "email", True)
    ev = _notice(conn, tenant, [a, b])
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])
    assert d[(a, "email")]["suppression_reason"] == "preference"
    assert d[(b, "email")]["status"] == "queued"


def test_quiet_hours_defer_to_the_window_end_with_an_injected_now(conn, tenant):
    uid = _user(conn, tenant)
    preferences.set_quiet_hours(conn, uid, "Asia/Tehran", time(22, 0), time(7, 0))
    # 23:30 in Tehran (UTC+3:30) is 20:00 UTC; the window ends at 07:00 Tehran = 03:30 UTC next day.
    now = datetime(2026, 6, 10, 20, 0, tzinfo=timezone.utc)
    ev = _notice(conn, tenant, [uid], now=now)
    fanout.fan_out(conn, ev["id"], now=now)
    d = _deliveries(conn, ev["id"])
    end = datetime(2026, 6, 11, 3, 30, tzinfo=timezone.utc)
    assert d[(uid, "email")]["status"] == "queued" and d[(uid, "email")]["deferred_until"] == end
    job = conn.execute("SELECT available_at FROM jobs WHERE id = %s", (d[(uid, "email")]["job_id"],)).fetchone()
    assert job["available_at"] == end
    assert d[(uid, "inbox")]["status"] == "delivered"       # the inbox is never deferred
    # Outside the window: no deferral.
    later = datetime(2026, 6, 11, 8, 0, tzinfo=timezone.utc)
    ev2 = _notice(conn, tenant, [uid], now=later)
    fanout.fan_out(conn, ev2["id"], now=later)
    assert _deliveries(conn, ev2["id"])[(uid, "email")]["deferred_until"] is None


def test_otp_ignores_quiet_hours_and_cannot_be_opted_out(conn, tenant):
    phone = "+989120000" + str(uuid.uuid4().int % 1000).zfill(3)
    uid = _user(conn, tenant, "member", phone=phone)
    preferences.set_quiet_hours(conn, uid, "UTC", time(0, 0), time(23, 59))
    with pytest.raises(OpsError) as exc:
        preferences.set_preference(conn, tenant["id"], uid, "otp", "sms", False)
    assert exc.value.code == "critical_category"
    # Even a stored "off" (written around the API) is ignored for a critical category.
    conn.execute("INSERT INTO notification_preferences (tenant_id, user_id, category, channel, enabled) "
                 "VALUES (%s, %s, 'otp', 'sms', false)", (tenant["id"], uid))
    now = datetime(2026, 6, 10, 12, 0, tzinfo=timezone.utc)
    out = demo_domain.request_otp(conn, tenant["id"], phone, now=now)
    fanout.fan_out(conn, out["event"]["id"], now=now)
    d = _deliveries(conn, out["event"]["id"])
    assert d[(uid, "sms")]["status"] == "queued" and d[(uid, "sms")]["deferred_until"] is None
    job = conn.execute("SELECT * FROM jobs WHERE id = %s", (d[(uid, "sms")]["job_id"],)).fetchone()
    assert job["type"] == "notifications.deliver_critical" and job["queue"] == "critical"
    assert job["expires_at"] is not None


def test_deliver_renders_the_live_template_and_records_the_version(conn, tenant):
    templates.seed(conn, "test_notice.sent", "email", "fa", "سلام", "<p>پیام {{ n|fa_digits }}</p>", "n", {"n": 1})
    templates.seed(conn, "test_notice.sent", "email", "fa", "سلام ۲", "<p>پیام دوم</p>", "")
    uid = _user(conn, tenant, locale="en")               # no "en" version: falls back to fa
    ev = _notice(conn, tenant, [uid])
    fanout.fan_out(conn, ev["id"])
    d = _deliveries(conn, ev["id"])[(uid, "email")]
    handlers.deliver(JobStub(conn, {"delivery_id": str(d["id"])}, tenant["id"]))
    after = _deliveries(conn, ev["id"])[(uid, "email")]
    assert after["status"] == "queued" and after["template_version"] == 2 and after["locale"] == "fa"  # sent: by email.send
    msg = conn.execute("SELECT * FROM outbound_messages WHERE id = %s::uuid", (after["provider_ref"],)).fetchone()
    assert msg["params"]["subject"] == "سلام ۲" and msg["params"]["text"] == "پیام دوم"
    assert '<html lang="fa" dir="rtl">' in msg["params"]["html"]
    assert '<div dir="rtl" lang="fa"' in msg["params"]["html"]
    # Running the job again changes nothing.
    handlers.deliver(JobStub(conn, {"delivery_id": str(d["id"])}, tenant["id"]))
    assert conn.execute("SELECT count(*) AS n FROM outbound_messages WHERE tenant_id = %s",
                        (tenant["id"],)).fetchone()["n"] == 1


def test_read_state_is_independent_of_delivery_state(conn, tenant):
    uid = _user(conn, tenant)
    ev = _notice(conn, tenant, [uid])
    fanout.fan_out(conn, ev["id"])
    row = inbox.page(conn, uid)["items"][0]
    assert inbox.unread_count(conn, uid) == 1
    inbox.mark(conn, uid, row["id"], "read")
    assert inbox.unread_count(conn, uid) == 0
    got = inbox.get(conn, uid, row["id"])
    assert got["seen_at"] is not None and got["read_at"] is not None
    d = _deliveries(conn, ev["id"])
    assert d[(uid, "email")]["status"] == "queued"          # unaffected by reading
    conn.execute("UPDATE deliveries SET status = 'failed' WHERE id = %s", (d[(uid, "email")]["id"],))
    assert inbox.get(conn, uid, row["id"])["read_at"] == got["read_at"]
    inbox.mark(conn, uid, row["id"], "archived")
    assert inbox.page(conn, uid)["items"] == []
    with pytest.raises(OpsError):
        inbox.mark(conn, uuid.uuid4(), row["id"], "read")   # someone else's row: not found


def test_templates_publish_checks_variables_and_published_is_immutable(conn):
    key = f"k{uuid.uuid4().hex[:8]}"
    draft = templates.save_draft(conn, AUTHOR, key, "inbox", "fa", subject="سلام {{ name }}",
                                 body="{{ name }} {{ order }}", variables="name", sample={"name": "x"})
    with pytest.raises(OpsError) as exc:
        templates.publish(conn, draft["id"], AUTHOR, "go")
    assert exc.value.code == "undeclared_variable"
    draft = templates.save_draft(conn, AUTHOR, key, "inbox", "fa", subject="سلام {{ name }}",
                                 body="{{ name }} {{ order }}", variables="name, order", sample={"name": "x"})
    with pytest.raises(OpsError) as exc:
        templates.publish(conn, draft["id"], AUTHOR, "go")
    assert exc.value.code == "missing_variable"
    draft = templates.save_draft(conn, AUTHOR, key, "inbox", "fa", subject="{{ ''.__class__.__mro__ }}",
                                 body="x", variables="", sample={})
    with pytest.raises(OpsError) as exc:
        templates.publish(conn, draft["id"], AUTHOR, "go")
    assert exc.value.code == "unsafe"
    draft = templates.save_draft(conn, AUTHOR, key, "inbox", "fa", subject="سلام {{ name }}",
                                 body="{{ order|fa_digits }}", variables="name, order",
                                 sample={"name": "x", "order": 12})
    row = templates.publish(conn, draft["id"], AUTHOR, "ready", request_key="pub-" + key)
    assert row["status"] == "published" and row["version"] == 1
    again = templates.publish(conn, draft["id"], AUTHOR, "ready", request_key="pub-" + key)
    assert again["id"] == row["id"]
    audit_rows = conn.execute("SELECT * FROM audit_log WHERE action = 'template.publish' AND target_id = %s",
                              (str(row["id"]),)).fetchall()
    assert len(audit_rows) == 1 and audit_rows[0]["reason"] == "ready"
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with conn.transaction():
            conn.execute("UPDATE notification_templates SET body = 'changed' WHERE id = %s", (row["id"],))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with conn.transaction():
            conn.execute("DELETE FROM notification_templates WHERE id = %s", (row["id"],))
    # Editing again makes a new draft version; rolling back publishes a copy of v1 as v3.
    v2 = templates.save_draft(conn, AUTHOR, key, "inbox", "fa", subject="v2 {{ name }}", body="b",
                              variables="name", sample={"name": "y"})
    assert v2["version"] == 2
    templates.publish(conn, v2["id"], AUTHOR, "v2")
    assert templates.live(conn, key)[("inbox", "fa")]["version"] == 2
    v3 = templates.rollback(conn, row["id"], AUTHOR, "v2 was wrong")
    assert v3["version"] == 3 and v3["rolled_back_from"] == 1 and v3["subject"] == row["subject"]
    assert templates.live(conn, key)[("inbox", "fa")]["version"] == 3


def test_cursor_pagination_is_stable_under_concurrent_inserts(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "cursor-t")
        uid = _user(c, t)
        for _ in range(5):
            fanout.fan_out(c, _notice(c, t, [uid])["id"])
        first = inbox.page(c, uid, limit=3)
        seen = [r["seq"] for r in first["items"]]
        since0 = max(seen)
        # Meanwhile another connection commits new rows while a third holds its insert open.
        with connect(db_url) as other:
            for _ in range(3):
                fanout.fan_out(other, _notice(other, t, [uid])["id"])
        rest = inbox.page(c, uid, before=first["next_cursor"], limit=10)
        seen += [r["seq"] for r in rest["items"]]
        assert len(seen) == 5 and len(set(seen)) == 5 and seen == sorted(seen, reverse=True)
        # A sync from the newest cursor yields exactly the 3 new rows, oldest first.
        new = inbox.page(c, uid, since=since0)["items"]
        assert len(new) == 3 and [r["seq"] for r in new] == sorted(r["seq"] for r in new)

        # An insert still open blocks the next one (the cursor lock): seq order is commit order.
        ev_a, ev_b = _notice(c, t, [uid]), _notice(c, t, [uid])
        a = connect(db_url)
        a.execute("BEGIN")
        fanout.fan_out(a, ev_a["id"])       # inside a's open transaction (savepoint), lock held
        done = threading.Event()

        def insert_b():
            with connect(db_url) as b:
                fanout.fan_out(b, ev_b["id"])
            done.set()
        th = threading.Thread(target=insert_b)
        th.start()
        assert not done.wait(0.5)            # b waits for a's commit
        a.execute("COMMIT")
        a.close()
        th.join(10)
        rows = inbox.page(c, uid, since=new[-1]["seq"])["items"]
        assert [r["event_id"] for r in rows] == [ev_a["id"], ev_b["id"]]


def test_two_relays_of_one_event_at_once_write_each_row_once_and_neither_fails(db_url):
    """The inbox insert skips a row another relay of the event wrote while this one decided its page
    (NOT EXISTS after the inbox lock, issue 27): the second relay adds nothing and raises nothing."""
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "two-relays")
        users = [_user(c, t) for _ in range(3)]
        ev = _notice(c, t, users)
    a = connect(db_url)
    a.execute("BEGIN")
    first = fanout.fan_out(a, ev["id"])      # inside a's open transaction: rows written, inbox lock held
    assert first["inbox"] == 3
    result: dict = {}

    def relay_b():
        try:
            with connect(db_url) as b:
                result["counts"] = fanout.fan_out(b, ev["id"])
        except Exception as exc:  # noqa: BLE001 -- the test reports it
            result["error"] = exc
    th = threading.Thread(target=relay_b)
    th.start()
    with connect(db_url) as c:
        # b decided its page from a snapshot without a's rows and now waits on a's uncommitted ones.
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND wait_event_type = 'Lock' AND state = 'active'").fetchone()["n"],
                 timeout=10, message="the second relay waiting for the first")
    a.execute("COMMIT")
    a.close()
    th.join(10)
    assert "error" not in result, result.get("error")
    assert result["counts"]["inbox"] == 0 and result["counts"]["deliveries"] == 0 and result["counts"]["jobs"] == 0
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM notifications WHERE event_id = %s", (ev["id"],)).fetchone()["n"] == 3
        assert len(_deliveries(c, ev["id"])) == 3 * len(policy.policy_for("test_notice.sent").channels)
