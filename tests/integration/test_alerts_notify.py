"""Alerts notify people: an opened alert is an outbox event in the alert's transaction, fanned out to
the on-call ops staff (operator tenant, ops/admin roles) on their channels; quiet hours defer a
warning, never a critical alert."""
from __future__ import annotations

import uuid
from datetime import time, timedelta

import pytest

from opsboard import alerts, auth, outbox
from opsboard.notifications import fanout, preferences, templates
from opsboard.schema import new_id
from tests.support import dashboard as seed


@pytest.fixture
def now(conn):
    return seed.db_now(conn) + timedelta(seconds=5)


@pytest.fixture
def staff(conn):
    """An operator tenant with an ops user, an admin and a support agent; a customer tenant's admin."""
    op = auth.ensure_tenant(conn, f"op-{uuid.uuid4().hex[:8]}", is_operator=True)
    customer = auth.ensure_tenant(conn, f"c-{uuid.uuid4().hex[:8]}")
    out = {}
    for name, role, tenant in (("ops", "ops", op), ("admin", "admin", op), ("agent", "support_agent", op),
                               ("customer_admin", "admin", customer)):
        u = auth.create_user(conn, f"{name}-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", role,
                             tenant["slug"])
        preferences.set_profile(conn, u["id"], phone="+98912" + str(uuid.uuid4().int % 10**7).zfill(7))
        conn.execute("INSERT INTO push_subscriptions (id, tenant_id, user_ref, endpoint, p256dh, auth) "
                     "VALUES (%s, %s, %s, %s, 'k', 'a')",
                     (new_id(), op["id"], str(u["id"]), f"https://push.example.test/{uuid.uuid4().hex}"))
        out[name] = u["id"]
    out["tenant"] = op
    return out


def _events(conn, type_=None):
    return conn.execute("SELECT * FROM outbox_events WHERE type LIKE 'alert.%%' ORDER BY id").fetchall()


def _no_worker(conn, tenant_id, now):
    """A ready job in ``default`` and no worker: the critical ``no_worker`` alert."""
    ids = seed.jobs(conn, tenant_id, 1, "diag.noop", queue="default")
    conn.execute("UPDATE jobs SET available_at = %s WHERE id = ANY(%s)", (now - timedelta(seconds=1), ids))


def _dead_rising(conn, tenant_id, now):
    """Four dead jobs over a threshold of three: the warning ``dead_rising`` alert."""
    seed.kill(conn, seed.jobs(conn, tenant_id, 4, "test.permanent"), "x", at=now - timedelta(minutes=1))
    return alerts.AlertConfig(dead_threshold=3)


def _deliveries(conn, event_id):
    return {(r["recipient_id"], r["channel"]): r for r in
            conn.execute("SELECT * FROM notification_deliveries WHERE event_id = %s", (event_id,)).fetchall()}


def test_an_opened_alert_publishes_its_event_with_the_alert_row(conn, staff, now):
    _no_worker(conn, staff["tenant"]["id"], now)
    assert alerts.evaluate(conn, now=now)["opened"] == 1
    [alert] = conn.execute("SELECT * FROM alerts WHERE closed_at IS NULL").fetchall()
    [ev] = _events(conn)
    assert ev["type"] == "alert.critical" and ev["version"] == 1 and ev["aggregate_type"] == "alert"
    assert ev["payload"] == {"alert_id": str(alert["id"]), "rule": "no_worker", "severity": "critical"}
    assert ev["tenant_id"] == staff["tenant"]["id"]  # a platform-wide alert: the operator tenant's event
    # Refreshing the open alert publishes nothing more.
    alerts.evaluate(conn, now=now + timedelta(seconds=15))
    assert len(_events(conn)) == 1


def test_alert_and_event_commit_together_or_not_at_all(conn, staff, now, monkeypatch):
    _no_worker(conn, staff["tenant"]["id"], now)

    def refuse(*args, **kwargs):
        raise outbox.EventRefused("invalid_field", "refused for the test", "x")
    monkeypatch.setattr(alerts.outbox, "publish", refuse)
    with pytest.raises(outbox.EventRefused):
        alerts.evaluate(conn, now=now)
    assert conn.execute("SELECT count(*) AS n FROM alerts").fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'alert.open'").fetchone()["n"] == 0
    assert _events(conn) == []


def test_a_warning_is_an_alert_opened_event(conn, staff, now):
    alerts.evaluate(conn, _dead_rising(conn, staff["tenant"]["id"], now), now=now)
    [ev] = _events(conn)
    assert ev["type"] == "alert.opened" and ev["payload"]["severity"] == "warning"
    assert ev["payload"]["rule"] == "dead_rising"


def test_fan_out_reaches_on_call_ops_staff_on_their_channels(conn, staff, now):
    templates.seed_shipped(conn)
    _no_worker(conn, staff["tenant"]["id"], now)
    alerts.evaluate(conn, now=now)
    [ev] = _events(conn)
    counts = fanout.fan_out(conn, ev["id"], now=now)
    assert counts["recipients"] == 2
    d = _deliveries(conn, ev["id"])
    assert {r for r, _ in d} == {staff["ops"], staff["admin"]}  # not the agent, not a customer's admin
    for uid in (staff["ops"], staff["admin"]):
        assert d[(uid, "inbox")]["status"] == "delivered"
        for ch in ("email", "push", "sms"):
            assert d[(uid, ch)]["status"] == "queued", (ch, d[(uid, ch)])
    [row] = conn.execute("SELECT * FROM notifications WHERE recipient_id = %s AND event_id = %s",
                         (staff["ops"], ev["id"])).fetchall()
    assert row["template_version"] == 1 and row["category"] == "alerts_critical"
    [alert] = conn.execute("SELECT id FROM alerts").fetchall()
    assert row["title"].startswith("بحرانی") and f"/alerts/{alert['id']}" in row["body"]
    jobs = conn.execute("SELECT type, queue FROM jobs WHERE event_id = %s AND type LIKE 'notifications.%%'",
                        (ev["id"],)).fetchall()
    assert jobs and all(j["type"] == "notifications.deliver_critical" for j in jobs)


def test_quiet_hours_defer_a_warning_but_not_a_critical_alert(conn, staff, now):
    preferences.set_quiet_hours(conn, staff["ops"], "UTC", time(0, 0), time(23, 59))
    config = _dead_rising(conn, staff["tenant"]["id"], now)
    alerts.evaluate(conn, config, now=now)
    [warning] = _events(conn)
    fanout.fan_out(conn, warning["id"], now=now)
    d = _deliveries(conn, warning["id"])
    assert d[(staff["ops"], "inbox")]["status"] == "delivered"
    for ch in ("email", "push"):
        assert d[(staff["ops"], ch)]["deferred_until"] is not None, ch
        assert d[(staff["admin"], ch)]["deferred_until"] is None, ch  # no quiet hours of their own
    assert (staff["ops"], "sms") not in d  # SMS only for critical alerts

    _no_worker(conn, staff["tenant"]["id"], now)
    alerts.evaluate(conn, config, now=now)
    [critical] = [e for e in _events(conn) if e["type"] == "alert.critical"]
    fanout.fan_out(conn, critical["id"], now=now)
    d = _deliveries(conn, critical["id"])
    for ch in ("email", "push", "sms"):
        assert d[(staff["ops"], ch)]["status"] == "queued" and d[(staff["ops"], ch)]["deferred_until"] is None, ch


def test_a_disabled_webhook_endpoint_notifies_on_call_staff_once(conn, staff, now):
    """The deliveries feature's own alert (an endpoint disabled after failing too long, or a 410) is
    published like every alert: on-call staff hear of it, once, however often it is disabled again."""
    from opsboard.deliveries import webhooks

    templates.seed_shipped(conn)
    customer = auth.ensure_tenant(conn, f"hooks-{uuid.uuid4().hex[:8]}")["id"]
    ep = webhooks.create_endpoint(conn, customer, "https://hooks.example.test/in", ["*"])
    assert webhooks.disable_endpoint(conn, customer, ep["id"], "http_410", now=now) is not None
    [alert] = conn.execute("SELECT * FROM alerts WHERE rule = 'webhook_endpoint_disabled'").fetchall()
    assert alert["tenant_id"] == customer and alert["key"] == str(ep["id"])
    [ev] = _events(conn)
    assert ev["type"] == "alert.opened" and ev["tenant_id"] == customer
    assert ev["payload"] == {"alert_id": str(alert["id"]), "rule": "webhook_endpoint_disabled",
                             "severity": "warning"}
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'alert.open' AND target_id = %s",
                        (str(alert["id"]),)).fetchone()["n"] == 1
    fanout.fan_out(conn, ev["id"], now=now)
    d = _deliveries(conn, ev["id"])
    assert {r for r, ch in d if ch == "inbox"} == {staff["ops"], staff["admin"]}
    # Disabled again (already disabled: nothing happens), or re-enabled and disabled while the alert is
    # open: the open alert is refreshed, nothing more is published.
    assert webhooks.disable_endpoint(conn, customer, ep["id"], "http_410", now=now) is None
    conn.execute("UPDATE webhook_endpoints SET enabled = true WHERE id = %s", (ep["id"],))
    assert webhooks.disable_endpoint(conn, customer, ep["id"], "http_410", now=now) is not None
    assert len(_events(conn)) == 1
