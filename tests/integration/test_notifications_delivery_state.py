"""Delivery state beyond `sent`, against the sandbox: the SMS gateway's status query and Web Push answers."""
from __future__ import annotations

import uuid

from opsboard import auth, outbox
from opsboard.deliveries import messages
from opsboard.notifications import fanout, policy, preferences
from opsboard.outbox import EventField
from tests.conftest import CATALOGUE, connect
from tests.integration.test_email_push import push_settings  # noqa: F401
from tests.support.delivery import provider_settings, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401

outbox.define_event(CATALOGUE, "test_receipt.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a financial notice by SMS and push.")
policy.declare(CATALOGUE, "test_receipt.sent", category="financial", channels=("inbox", "sms", "push"),
               recipients=lambda conn, event: event["payload"]["user_ids"])


outbox.define_event(CATALOGUE, "test_breach.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a security notice (a critical category) on every channel.")
policy.declare(CATALOGUE, "test_breach.sent", category="security", channels=("inbox", "email", "sms", "push"),
               recipients=lambda conn, event: event["payload"]["user_ids"])


def _fan_out(db_url, sandbox, phone, *, device=False, event_type="test_receipt.sent"):
    """One member with ``phone`` (and a push device), one event fanned out; returns (tenant id, event id)."""
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        u = auth.create_user(c, f"m-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery", "member", "acme")
        preferences.set_profile(c, u["id"], phone=phone)
        if device:
            messages.add_push_subscription(c, tenant["id"], sandbox.new_push_subscription(), user_ref=str(u["id"]),
                                           allow=sandbox_settings(sandbox).webhook_allow)
        with c.transaction():
            ev = outbox.publish(c, event_type, 1, aggregate=("notice", uuid.uuid4().hex),
                                tenant=tenant["id"], payload={"user_ids": [str(u["id"])]})
        fanout.fan_out(c, ev["id"])
    return tenant["id"], ev["id"]


def _delivery(db_url, event_id, channel):
    with connect(db_url) as c:
        return c.execute("SELECT * FROM deliveries WHERE event_id = %s AND channel = %s",
                         (event_id, channel)).fetchone()


def _job(db_url, type_):
    with connect(db_url) as c:
        return c.execute("SELECT * FROM jobs WHERE type = %s ORDER BY created_at DESC LIMIT 1", (type_,)).fetchone()


def _send_sms(db_url, runner, event_id):
    """Run the SMS delivery's deliver job and its sms.send job; returns the notifications.sms_status job."""
    assert runner.run(_delivery(db_url, event_id, "sms")["job_id"])["status"] == "succeeded"
    assert _delivery(db_url, event_id, "sms")["status"] == "sent"
    assert runner.run(_job(db_url, "sms.send")["id"])["status"] == "succeeded"
    status_job = _job(db_url, "notifications.sms_status")
    assert status_job["available_at"] > status_job["created_at"]          # asked later, not at once
    runner.make_due(status_job["id"])
    return status_job


def test_an_sms_receipt_makes_the_delivery_delivered(db_url, sandbox, runner, provider_settings):
    _, ev = _fan_out(db_url, sandbox, "+989121110001")
    job = _send_sms(db_url, runner, ev)
    assert runner.run(job["id"])["status"] == "succeeded"
    d = _delivery(db_url, ev, "sms")
    assert (d["status"], d["error_code"]) == ("delivered", None)
    # The query went to the gateway by client id (our outbound message id).
    (sms,) = sandbox.records("sms")
    assert sms["client_id"] == d["provider_ref"]


def test_an_sms_lost_after_acceptance_makes_the_delivery_failed(db_url, sandbox, runner, provider_settings):
    sandbox.sms_final_status("+989121110002", "undeliverable")
    _, ev = _fan_out(db_url, sandbox, "+989121110002")
    job = _send_sms(db_url, runner, ev)
    assert runner.run(job["id"])["status"] == "succeeded"
    d = _delivery(db_url, ev, "sms")
    assert (d["status"], d["error_code"]) == ("failed", "sms_undeliverable")


def test_an_sms_still_on_its_way_is_asked_again_later(db_url, sandbox, runner, provider_settings):
    sandbox.sms_final_status("+989121110003", "queued")
    _, ev = _fan_out(db_url, sandbox, "+989121110003")
    job = _send_sms(db_url, runner, ev)
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == ("retryable", "sms_pending")
    assert _delivery(db_url, ev, "sms")["status"] == "sent"
    sandbox.sms_final_status("+989121110003", "delivered")
    runner.make_due(job["id"])
    assert runner.run(job["id"])["status"] == "succeeded"
    assert _delivery(db_url, ev, "sms")["status"] == "delivered"


def test_a_push_accepted_by_the_push_service_is_delivered(db_url, sandbox, runner, push_settings):
    _, ev = _fan_out(db_url, sandbox, "+989121110004", device=True)
    assert runner.run(_delivery(db_url, ev, "push")["job_id"])["status"] == "succeeded"
    assert _delivery(db_url, ev, "push")["status"] == "sent"
    assert runner.run(_job(db_url, "push.send")["id"])["status"] == "succeeded"
    assert _delivery(db_url, ev, "push")["status"] == "delivered"


def test_a_push_refused_for_good_is_failed(db_url, sandbox, runner, push_settings):
    _, ev = _fan_out(db_url, sandbox, "+989121110005", device=True)
    for sub in sandbox.state.subscriptions.values():
        sub.gone = True
    assert runner.run(_delivery(db_url, ev, "push")["job_id"])["status"] == "succeeded"
    assert runner.run(_job(db_url, "push.send")["id"])["status"] == "dead"
    d = _delivery(db_url, ev, "push")
    assert (d["status"], d["error_code"]) == ("failed", "push_410")


def test_a_critical_notification_sends_every_channel_on_the_critical_queue(db_url, sandbox, runner, push_settings):
    """The bug this guards against: a critical alert's email and push jobs went to ``default``, so a
    ``no_worker`` alert about ``default`` reached the on-call staff by SMS and inbox only."""
    _, ev = _fan_out(db_url, sandbox, "+989121110006", device=True, event_type="test_breach.sent")
    for channel in ("email", "push", "sms"):
        d = _delivery(db_url, ev, channel)
        assert runner.run(d["job_id"], queue_name="critical")["status"] == "succeeded", channel
    with connect(db_url) as c:
        sends = c.execute("SELECT type, queue, priority FROM jobs WHERE type IN ('email.send', 'push.send', 'sms.otp')"
                          " ORDER BY type").fetchall()
    assert [(j["type"], j["queue"], j["priority"]) for j in sends] == [
        ("email.send", "critical", 0), ("push.send", "critical", 0), ("sms.otp", "critical", 0)]
