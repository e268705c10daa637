"""The delivery state machine (issue 26), per channel and final state, through the product.

Every job runs through the worker's executor (``tests.support.delivery.Runner``: claim,
JobContext, handler, classification, recorded outcome) against the provider sandbox:
aiosmtpd for SMTP (with DSNs it POSTs to the live web app), the SMS gateway with its
delivery reports, the Web Push service.  States (docs/deliveries.md):

    queued -> sent -> delivered | failed | bounced | expired      (suppressed: never started)
"""
from __future__ import annotations

import dataclasses
import threading
import uuid

import pytest
from werkzeug.serving import make_server

from opsboard import auth, db, outbox
from opsboard.deliveries import messages
from opsboard.notifications import fanout, policy, preferences
from opsboard.outbox import EventField
from tests.conftest import CATALOGUE, connect, make_config, wait_for
from tests.integration.test_email_push import push_settings  # noqa: F401
from tests.support.delivery import provider_settings, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401
from worker.services.expiry import Expiry

outbox.define_event(CATALOGUE, "test_receipt.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a financial notice by email, SMS and push.")
policy.declare(CATALOGUE, "test_receipt.sent", category="financial", channels=("inbox", "email", "sms", "push"),
               recipients=lambda conn, event: event["payload"]["user_ids"])
outbox.define_event(CATALOGUE, "test_receipt.security", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a critical (security) notice by email and SMS, with a time to live.")
policy.declare(CATALOGUE, "test_receipt.security", category="security", channels=("inbox", "email", "sms"),
               recipients=lambda conn, event: event["payload"]["user_ids"])

outbox.define_event(CATALOGUE, "test_breach.sent", 1, aggregate="notice", fields={"user_ids": EventField(list)},
                    description="Test-only: a security notice (a critical category) on every channel.")
policy.declare(CATALOGUE, "test_breach.sent", category="security", channels=("inbox", "email", "sms", "push"),
               recipients=lambda conn, event: event["payload"]["user_ids"])

REPORT_SECRET = "dsn-secret-for-tests"


# ---------------------------------------------------------------- helpers


@pytest.fixture
def web(db_url, sandbox):
    """The web app on a live port, accepting DSNs; the sandbox's SMTP posts them there."""
    from opsboard.db import Database
    from opsboard.web.app import create_app
    base = make_config(database_url=db_url)
    config = base.replace(providers=dataclasses.replace(base.providers, email_report_secret=REPORT_SECRET))
    database = Database(db_url, min_size=1, max_size=4).open()
    app = create_app({"OPSBOARD": config, "DATABASE": database, "TESTING": True, "CATALOGUE": CATALOGUE})
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    sandbox.email_report_url = f"http://127.0.0.1:{srv.server_port}/api/providers/email/dsn"
    sandbox.email_report_secret = REPORT_SECRET
    yield app
    srv.shutdown()
    database.close()


def _fan_out(db_url, sandbox, *, phone="+989121110000", device=False, event="test_receipt.sent"):
    """One member (email, phone, maybe a push device), one event fanned out: (tenant id, event id, email)."""
    email = f"m-{uuid.uuid4().hex[:8]}@example.test"
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        u = auth.create_user(c, email, "correct horse battery", "member", "acme")
        preferences.set_profile(c, u["id"], phone=phone)
        if device:
            messages.add_push_subscription(c, tenant["id"], sandbox.new_push_subscription(), user_ref=str(u["id"]),
                                           allow=sandbox_settings(sandbox).webhook_allow)
        with c.transaction():
            ev = outbox.publish(c, event, 1, aggregate=("notice", uuid.uuid4().hex),
                                tenant=tenant["id"], payload={"user_ids": [str(u["id"])]})
        fanout.fan_out(c, ev["id"])
    return tenant["id"], ev["id"], email


def _delivery(db_url, event_id, channel):
    with connect(db_url) as c:
        return c.execute("SELECT * FROM notification_deliveries WHERE event_id = %s AND channel = %s",
                         (event_id, channel)).fetchone()


def _provider_job(db_url, d):
    """The provider job the deliver job enqueued for delivery ``d`` (email.send, sms.send/otp, push.send)."""
    with connect(db_url) as c:
        if d["channel"] == "push":
            return c.execute("SELECT j.* FROM jobs j JOIN notifications n ON n.id::text = j.payload->>'notification_id' "
                             "WHERE j.type = 'push.send' AND n.id = %s", (d["notification_id"],)).fetchone()
        return c.execute("SELECT * FROM jobs WHERE idempotency_key = %s AND type IN ('email.send', 'sms.send', "
                         "'sms.otp')", (f"delivery:{d['id']}",)).fetchone()


def _hand_over(db_url, runner, event_id, channel):
    """Run the delivery's deliver job: it stays queued, handed to its provider job; returns that job."""
    d = _delivery(db_url, event_id, channel)
    with connect(db_url) as c:
        deliver = c.execute("SELECT * FROM jobs WHERE id = %s", (d["job_id"],)).fetchone()
    assert _run(runner, deliver)["status"] == "succeeded"
    d = _delivery(db_url, event_id, channel)
    assert d["status"] == "queued" and d["provider_ref"] is not None      # not sent until the provider says so
    return _provider_job(db_url, d)


def _run(runner, job):
    return runner.run(job["id"], queue_name=job["queue"])


def _last_attempt(db_url, job):
    """Make the job's next attempt its last (its retries are exhausted after it)."""
    with connect(db_url) as c:
        c.execute("UPDATE jobs SET max_attempts = attempts + 1 WHERE id = %s", (job["id"],))


def _state(d):
    return d["status"], d["error_code"]


def _dies_on_its_last_attempt(db_url, job, event_id, channel):
    """A worker claims the provider job's last attempt and dies: the reaper makes it dead
    (lease_expired) while its delivery is still queued; then the expiry service's safety net runs."""
    from opsboard import jobqueue
    from worker.services.reaper import Reaper
    _last_attempt(db_url, job)
    with connect(db_url) as c:
        claimed = jobqueue.claim_batch(c, job["queue"], "doomed-worker", 200, 30)
        assert job["id"] in [r["id"] for r in claimed]
        c.execute("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = %s", (job["id"],))
        Reaper().run_once(c)
        assert c.execute("SELECT status FROM jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "dead"
        assert _state(_delivery(db_url, event_id, channel)) == ("queued", None)
        Expiry().run_once(c)


# ---------------------------------------------------------------- inbox


def test_inbox_is_delivered_at_once(db_url, sandbox):
    _, ev, _ = _fan_out(db_url, sandbox)
    assert _state(_delivery(db_url, ev, "inbox")) == ("delivered", None)


# ---------------------------------------------------------------- email


def test_email_accepted_by_smtp_is_sent(db_url, sandbox, runner, provider_settings):
    _, ev, email = _fan_out(db_url, sandbox)
    job = _hand_over(db_url, runner, ev, "email")
    assert _run(runner, job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "email")) == ("sent", None)
    (rec,) = sandbox.records("email")
    assert rec["rcpt_to"] == [email]


def test_email_refused_with_a_5xx_is_failed_never_sent(db_url, sandbox, runner, provider_settings):
    """The rule "failed, never sent": without outbound_message_failed moving the delivery it stays queued."""
    _, ev, _ = _fan_out(db_url, sandbox)
    job = _hand_over(db_url, runner, ev, "email")
    sandbox.fault("smtp", status=550)
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "email")) == ("failed", "smtp_550")
    with connect(db_url) as c:
        msg = c.execute("SELECT status FROM outbound_messages WHERE id = %s::uuid",
                        (_delivery(db_url, ev, "email")["provider_ref"],)).fetchone()
    assert msg["status"] == "failed"


def test_email_out_of_retries_is_failed(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox)
    job = _hand_over(db_url, runner, ev, "email")
    sandbox.fault("smtp", status=451)
    assert _run(runner, job)["status"] == "retryable"                    # a 4xx: tried again later
    assert _state(_delivery(db_url, ev, "email")) == ("queued", None)
    _last_attempt(db_url, job)
    runner.make_due(job["id"])
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "email")) == ("failed", "smtp_451")


def test_email_whose_worker_died_on_the_last_attempt_is_failed(db_url, sandbox, runner, provider_settings):
    """No handler said anything: the reaper makes the job dead (lease_expired) and the expiry service's
    safety net (delivery_settle_dead_jobs) fails the delivery instead of leaving it queued."""
    _, ev, _ = _fan_out(db_url, sandbox)
    _dies_on_its_last_attempt(db_url, _hand_over(db_url, runner, ev, "email"), ev, "email")
    assert _state(_delivery(db_url, ev, "email")) == ("failed", "lease_expired")


def test_email_bounced_by_a_dsn_is_bounced_and_a_late_sent_does_not_undo_it(db_url, sandbox, runner,
                                                                            provider_settings, web):
    _, ev, email = _fan_out(db_url, sandbox)
    sandbox.email_outcome(email, "failed")
    job = _hand_over(db_url, runner, ev, "email")
    # The sandbox answers 250 only after the product took the DSN: the report comes before "sent".
    assert _run(runner, job)["status"] == "succeeded"
    (dsn,) = sandbox.records("dsn")
    assert (dsn["action"], dsn["answered"]) == ("failed", 200)
    assert _state(_delivery(db_url, ev, "email")) == ("bounced", "dsn_5.1.1")
    with connect(db_url) as c:                                            # the message itself was sent
        assert c.execute("SELECT status FROM outbound_messages WHERE id = %s::uuid",
                         (dsn["message_id"].strip("<>").split("@")[0],)).fetchone()["status"] == "sent"


def test_email_confirmed_by_a_dsn_is_delivered(db_url, sandbox, runner, provider_settings, web):
    _, ev, email = _fan_out(db_url, sandbox)
    sandbox.email_outcome(email, "delivered")
    job = _hand_over(db_url, runner, ev, "email")
    assert _run(runner, job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "email")) == ("delivered", None)


def test_email_past_its_time_to_live_is_expired(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox, event="test_receipt.security")
    job = _hand_over(db_url, runner, ev, "email")
    assert job["expires_at"] is not None
    with connect(db_url) as c:
        assert Expiry().run_once(c, now=job["expires_at"]) >= 1
        assert c.execute("SELECT status, last_error_code FROM jobs WHERE id = %s", (job["id"],)).fetchone() == {
            "status": "dead", "last_error_code": "expired"}
    assert _state(_delivery(db_url, ev, "email")) == ("expired", "expired")
    assert sandbox.records("email") == []


def test_a_dsn_needs_the_signature(db_url, sandbox, runner, provider_settings, web):
    """A forged or unsigned report moves nothing (401); a report of no message of ours is a 400."""
    from opsboard.deliveries import dsn
    _, ev, email = _fan_out(db_url, sandbox)
    job = _hand_over(db_url, runner, ev, "email")
    assert _run(runner, job)["status"] == "succeeded"
    d = _delivery(db_url, ev, "email")
    raw = dsn.build(f"Message-ID: <{d['provider_ref']}@localhost>", email, "failed", "5.1.1")
    client = web.test_client()
    for signature in (None, dsn.sign("wrong secret", raw), "t=1,v1=00"):
        headers = {dsn.SIGNATURE_HEADER: signature} if signature else {}
        r = client.post("/api/providers/email/dsn", data=raw, headers=headers)
        assert r.status_code == 401 and r.json["error"] == "invalid_signature"
    assert _state(_delivery(db_url, ev, "email")) == ("sent", None)
    r = client.post("/api/providers/email/dsn", data=b"hello", headers={dsn.SIGNATURE_HEADER: dsn.sign(REPORT_SECRET,
                                                                                                        b"hello")})
    assert r.status_code == 400 and r.json["error"] == "invalid_report"
    r = client.post("/api/providers/email/dsn", data=raw, headers={dsn.SIGNATURE_HEADER: dsn.sign(REPORT_SECRET, raw)})
    assert r.status_code == 200 and r.json == {"moved": 1}
    assert _state(_delivery(db_url, ev, "email")) == ("bounced", "dsn_5.1.1")
    # Said again, or contradicted: a final state never changes.
    later = dsn.build(f"Message-ID: <{d['provider_ref']}@localhost>", email, "delivered", "2.0.0")
    r = client.post("/api/providers/email/dsn", data=later, headers={dsn.SIGNATURE_HEADER: dsn.sign(REPORT_SECRET,
                                                                                                      later)})
    assert r.json == {"moved": 0}
    assert _state(_delivery(db_url, ev, "email")) == ("bounced", "dsn_5.1.1")


# ---------------------------------------------------------------- SMS


def _sms_sent(db_url, runner, ev):
    """Hand the SMS over, run sms.send (accepted: sent); returns the notifications.sms_status job, due."""
    job = _hand_over(db_url, runner, ev, "sms")
    assert _run(runner, job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "sms")) == ("sent", None)
    with connect(db_url) as c:
        status_job = c.execute("SELECT * FROM jobs WHERE type = 'notifications.sms_status' AND idempotency_key = %s",
                               (f"sms_status:{_delivery(db_url, ev, 'sms')['id']}",)).fetchone()
    assert status_job["available_at"] > status_job["created_at"]          # asked later, not at once
    runner.make_due(status_job["id"])
    return status_job


def test_sms_with_a_delivery_report_is_delivered(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110001")
    job = _sms_sent(db_url, runner, ev)
    assert _run(runner, job)["status"] == "succeeded"
    d = _delivery(db_url, ev, "sms")
    assert _state(d) == ("delivered", None)
    (sms,) = sandbox.records("sms")
    assert sms["client_id"] == d["provider_ref"]                          # asked by client id


@pytest.mark.parametrize("report, state", [("undeliverable", "bounced"), ("expired", "expired"),
                                           ("rejected", "failed")])
def test_sms_report_after_acceptance_sets_the_final_state(db_url, sandbox, runner, provider_settings, report, state):
    phone = f"+98912111{uuid.uuid4().int % 10000:04d}"
    sandbox.sms_final_status(phone, report)
    _, ev, _ = _fan_out(db_url, sandbox, phone=phone)
    job = _sms_sent(db_url, runner, ev)
    assert _run(runner, job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "sms")) == (state, f"sms_{report}")


def test_sms_still_on_its_way_is_asked_again_and_a_late_report_never_moves_a_final_state(
        db_url, sandbox, runner, provider_settings):
    sandbox.sms_final_status("+989121110003", "queued")
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110003")
    job = _sms_sent(db_url, runner, ev)
    done = _run(runner, job)
    assert (done["status"], done["last_error_code"]) == ("retryable", "sms_pending")
    assert _delivery(db_url, ev, "sms")["status"] == "sent"
    sandbox.sms_final_status("+989121110003", "delivered")
    runner.make_due(job["id"])
    assert _run(runner, job)["status"] == "succeeded"
    d = _delivery(db_url, ev, "sms")
    assert d["status"] == "delivered"
    with connect(db_url) as c:      # a late "sent" or a contradicting report: no row moves
        for status in ("sent", "failed", "bounced"):
            assert db.one(c, "delivery_confirm", {"id": d["id"], "tenant_id": d["tenant_id"], "status": status,
                                                  "error_code": "late", "now": None}) is None
    assert _state(_delivery(db_url, ev, "sms")) == ("delivered", None)


def _status_job(db_url, ev):
    with connect(db_url) as c:
        return c.execute("SELECT * FROM jobs WHERE type = 'notifications.sms_status' AND idempotency_key = %s",
                         (f"sms_status:{_delivery(db_url, ev, 'sms')['id']}",)).fetchone()


def test_the_receipt_query_waits_for_an_sms_not_sent_yet_without_spending_attempts(
        db_url, sandbox, runner, provider_settings):
    """The gateway is down, so sms.send retries (for minutes, or for as long as an operator holds the
    provider): the receipt query snoozes meanwhile instead of spending its attempts -- before, it went
    dead with sms_not_sent_yet -- and asks once the SMS is sent."""
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110009")
    send = _hand_over(db_url, runner, ev, "sms")
    sandbox.fault("/sms/messages", status=503)
    assert _run(runner, send)["status"] == "retryable"
    status_job = _status_job(db_url, ev)
    with connect(db_url) as c:      # its last attempt: a Retryable would make it dead
        c.execute("UPDATE jobs SET max_attempts = 1 WHERE id = %s", (status_job["id"],))
    runner.make_due(status_job["id"])
    waited = _run(runner, status_job)
    assert (waited["status"], waited["last_error_code"], waited["attempts"]) == ("pending", "sms_not_sent_yet", 0)
    assert waited["available_at"] > waited["started_at"]
    sandbox.clear_faults()
    runner.make_due(send["id"])
    assert _run(runner, send)["status"] == "succeeded"
    runner.make_due(status_job["id"])
    assert _run(runner, status_job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "sms")) == ("delivered", None)


def test_the_receipt_query_ends_when_its_sms_job_was_cancelled(db_url, sandbox, runner, provider_settings):
    """An operator cancelled the sms.send job before it sent anything: no SMS will be sent, so the
    receipt query has nothing to ask and ends at once (it snoozes only while a send is to come)."""
    from opsboard import audit, jobqueue
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110010")
    send = _hand_over(db_url, runner, ev, "sms")
    with connect(db_url) as c:
        jobqueue.cancel(c, send["id"], actor=audit.Actor("ops@example.test"), reason="wrong number")
    status_job = _status_job(db_url, ev)
    with connect(db_url) as c:
        c.execute("UPDATE jobs SET max_attempts = 1 WHERE id = %s", (status_job["id"],))
    runner.make_due(status_job["id"])
    assert _run(runner, status_job)["status"] == "succeeded"
    assert sandbox.records("sms") == []                                   # nothing sent, nothing asked


def test_a_bulk_sms_leaves_the_gateways_critical_reserve_of_tokens_to_an_otp(db_url, sandbox, runner,
                                                                             provider_settings):
    """sms_gateway keeps a critical share (4 of its 8 at once): jobs of the other queues also leave that
    share of its rate bucket's burst (20 of 40 tokens), so a broadcast's SMS can drain the bucket only
    down to the reserve and an OTP still finds a token at once.  The bucket is set at the reserve and
    frozen (its clock an hour ahead: no refill during the test)."""
    from opsboard import jobtypes
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110011")
    bulk = _hand_over(db_url, runner, ev, "sms")
    _, ev2, _ = _fan_out(db_url, sandbox, phone="+989121110012", event="test_receipt.security")
    otp = _hand_over(db_url, runner, ev2, "sms")
    assert (bulk["type"], bulk["queue"], otp["type"], otp["queue"]) == ("sms.send", "default", "sms.otp", "critical")
    reserve = jobtypes.provider("sms_gateway").rate_floor("default")
    assert reserve == 20 and jobtypes.provider("sms_gateway").rate_floor("critical") == 0
    with connect(db_url) as c:
        c.execute("INSERT INTO rate_limits (name, capacity, refill_rate, tokens, last_granted, updated_at)"
                  " VALUES ('provider:sms_gateway', 40, 20, %s, true, now() + interval '1 hour')"
                  " ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at",
                  (reserve,))
    waited = _run(runner, bulk)
    assert (waited["status"], waited["last_error_code"], waited["attempts"]) == ("pending", "rate_limited", 0)
    assert _run(runner, otp)["status"] == "succeeded"
    assert [r["to"] for r in sandbox.records("sms")] == ["+989121110012"]
    with connect(db_url) as c:
        assert c.execute("SELECT tokens FROM rate_limits WHERE name = 'provider:sms_gateway'").fetchone()["tokens"] \
            == pytest.approx(reserve - 1)


def test_sms_refused_by_the_gateway_is_failed(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110006")
    job = _hand_over(db_url, runner, ev, "sms")
    sandbox.fault("/sms/messages", status=400)
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "sms")) == ("failed", "sms_400")


def test_sms_out_of_retries_is_failed(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110007")
    job = _hand_over(db_url, runner, ev, "sms")
    sandbox.fault("/sms/messages", status=503)
    _last_attempt(db_url, job)
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "sms")) == ("failed", "sms_503")


def test_sms_past_its_time_to_live_is_expired_and_never_sent(db_url, sandbox, runner, provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110008", event="test_receipt.security")
    job = _hand_over(db_url, runner, ev, "sms")
    assert job["type"] == "sms.otp" and job["expires_at"] is not None
    with connect(db_url) as c:
        Expiry().run_once(c, now=job["expires_at"])
    assert _state(_delivery(db_url, ev, "sms")) == ("expired", "expired")
    assert sandbox.records("sms") == []


# ---------------------------------------------------------------- Web Push


def test_push_accepted_by_the_push_service_is_sent_not_delivered(db_url, sandbox, runner, push_settings):
    _, ev, _ = _fan_out(db_url, sandbox, device=True)
    job = _hand_over(db_url, runner, ev, "push")
    assert _run(runner, job)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "push")) == ("sent", None)


def test_push_to_a_gone_subscription_is_expired_and_the_device_deactivated(db_url, sandbox, runner, push_settings):
    _, ev, _ = _fan_out(db_url, sandbox, device=True)
    for sub in sandbox.state.subscriptions.values():
        sub.gone = True
    job = _hand_over(db_url, runner, ev, "push")
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "push")) == ("expired", "push_410")
    with connect(db_url) as c:
        sub = c.execute("SELECT state, invalid_reason FROM push_subscriptions WHERE id = %s::uuid",
                        (job["payload"]["subscription_id"],)).fetchone()
    assert sub == {"state": "invalid", "invalid_reason": "push_410"}


def test_a_critical_notification_sends_every_channel_on_the_critical_queue(db_url, sandbox, runner, push_settings):
    """The bug this guards against: a critical alert's email and push jobs went to ``default``, so a
    ``no_worker`` alert about ``default`` reached the on-call staff by SMS and inbox only."""
    _, ev, _ = _fan_out(db_url, sandbox, phone="+989121110006", device=True, event="test_breach.sent")
    for channel in ("email", "push", "sms"):
        d = _delivery(db_url, ev, channel)
        assert runner.run(d["job_id"], queue_name="critical")["status"] == "succeeded", channel
    with connect(db_url) as c:
        sends = c.execute("SELECT type, queue, priority FROM jobs WHERE type IN ('email.send', 'push.send', 'sms.otp')"
                          " ORDER BY type").fetchall()
    assert [(j["type"], j["queue"], j["priority"]) for j in sends] == [
        ("email.send", "critical", 0), ("push.send", "critical", 0), ("sms.otp", "critical", 0)]


def test_push_refused_for_good_is_failed(db_url, sandbox, runner, push_settings):
    _, ev, _ = _fan_out(db_url, sandbox, device=True)
    job = _hand_over(db_url, runner, ev, "push")
    sandbox.fault("/push/", status=400)
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "push")) == ("failed", "push_400")


def test_push_out_of_retries_is_failed(db_url, sandbox, runner, push_settings):
    _, ev, _ = _fan_out(db_url, sandbox, device=True)
    job = _hand_over(db_url, runner, ev, "push")
    sandbox.fault("/push/", status=503)
    _last_attempt(db_url, job)
    assert _run(runner, job)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "push")) == ("failed", "push_503")


def test_push_whose_worker_died_on_the_last_attempt_is_failed(db_url, sandbox, runner, push_settings):
    """As for email: the reaper makes the push.send job dead and the safety net
    (delivery_settle_dead_push_jobs) fails the push delivery instead of leaving it queued."""
    _, ev, _ = _fan_out(db_url, sandbox, device=True)
    _dies_on_its_last_attempt(db_url, _hand_over(db_url, runner, ev, "push"), ev, "push")
    assert _state(_delivery(db_url, ev, "push")) == ("failed", "lease_expired")
    assert sandbox.records("push") == []                                  # nothing reached the push service


# ---------------------------------------------------------------- an operator's replay


def _replay(db_url, dead_job):
    """An operator replays the dead provider job (as the dead-letter page does): the new job and the
    audit row's ``after``."""
    from opsboard import audit, jobqueue
    with connect(db_url) as c:
        with c.transaction():
            replayed = jobqueue.replay(c, dead_job["id"], audit.Actor("ops@example.test"), "provider is back", None)
        after = c.execute("SELECT after FROM audit_log WHERE action = 'job.replay' AND target_id = %s",
                          (str(dead_job["id"]),)).fetchone()["after"]
    return replayed, after


@pytest.mark.parametrize("channel, route, refused", [("email", "smtp", "smtp_550"),
                                                     ("sms", "/sms/messages", "sms_400"),
                                                     ("push", "/push/", "push_400")])
def test_a_replayed_provider_job_that_succeeds_makes_its_delivery_sent(db_url, sandbox, runner, push_settings,
                                                                       channel, route, refused):
    """The provider refused for good (the job dead, the delivery failed); the provider is fixed and an
    operator replays the dead job: the delivery goes back to queued with the replay and ends sent --
    before, it stayed failed while the message reached the recipient."""
    _, ev, _ = _fan_out(db_url, sandbox, device=channel == "push")
    job = _hand_over(db_url, runner, ev, channel)
    sandbox.fault(route, status=550 if channel == "email" else 400)
    assert _run(runner, job)["status"] == "dead"
    failed = _delivery(db_url, ev, channel)
    assert _state(failed) == ("failed", refused)
    sandbox.clear_faults()
    replayed, after = _replay(db_url, job)
    assert _state(_delivery(db_url, ev, channel)) == ("queued", None)
    assert str(failed["id"]) in after["reopened"]                       # the audit row says what it reopened
    assert _run(runner, replayed)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, channel)) == ("sent", None)
    if channel != "push":
        with connect(db_url) as c:
            assert c.execute("SELECT status FROM outbound_messages WHERE id = %s::uuid",
                             (failed["provider_ref"],)).fetchone()["status"] == "sent"


def test_a_replayed_provider_job_that_fails_again_leaves_its_delivery_failed(db_url, sandbox, runner,
                                                                             provider_settings):
    _, ev, _ = _fan_out(db_url, sandbox)
    job = _hand_over(db_url, runner, ev, "email")
    sandbox.fault("smtp", status=550)
    assert _run(runner, job)["status"] == "dead"
    replayed, _ = _replay(db_url, job)
    sandbox.fault("smtp", status=554)
    assert _run(runner, replayed)["status"] == "dead"
    assert _state(_delivery(db_url, ev, "email")) == ("failed", "smtp_554")


@pytest.mark.parametrize("channel", ["email", "sms", "push"])
def test_a_provider_job_cancelled_before_it_ran_fails_its_delivery_and_message(db_url, sandbox, runner,
                                                                               push_settings, channel):
    """An operator cancels the provider job before it sent anything: nothing will be sent, so the
    delivery is failed (cancelled) with its message, in the cancel's transaction, and the audit row
    names them -- before, the delivery stayed queued for good."""
    from opsboard import audit, jobqueue
    _, ev, _ = _fan_out(db_url, sandbox, device=channel == "push")
    job = _hand_over(db_url, runner, ev, channel)
    d = _delivery(db_url, ev, channel)
    with connect(db_url) as c:
        jobqueue.cancel(c, job["id"], actor=audit.Actor("ops@example.test"), reason="sent by hand", request_key="c1")
        after = c.execute("SELECT after FROM audit_log WHERE action = 'job.cancel' AND target_id = %s",
                          (str(job["id"]),)).fetchone()["after"]
    assert _state(_delivery(db_url, ev, channel)) == ("failed", "cancelled")
    assert str(d["id"]) in after["settled"]
    if channel != "push":
        with connect(db_url) as c:
            assert c.execute("SELECT status FROM outbound_messages WHERE id = %s::uuid",
                             (d["provider_ref"],)).fetchone()["status"] == "failed"
    assert sandbox.records(channel) == []


def test_deliveries_of_a_bulk_cancel_are_failed_and_handed_over_ones_wait_for_their_provider_job(
        db_url, sandbox, runner, provider_settings):
    """Cancel-many of the deliver jobs (an incident: a notification sent by mistake): every delivery not
    yet handed over is failed (cancelled); one already handed to its email.send waits for that job."""
    from opsboard import audit, jobqueue
    _, ev, _ = _fan_out(db_url, sandbox)
    handed = _hand_over(db_url, runner, ev, "email")                     # the email's deliver job ran
    sms = _delivery(db_url, ev, "sms")
    with connect(db_url) as c:
        result = jobqueue.cancel_many(c, jobqueue.CancelFilter(type="notifications.deliver"),
                                      audit.Actor("ops@example.test"), "sent by mistake", "bulk-c1")
        after = c.execute("SELECT after FROM audit_log WHERE action = 'job.cancel_many'").fetchone()["after"]
    assert [r["id"] for r in result.cancelled] == [sms["job_id"]] and after["settled"] == 1
    assert _state(_delivery(db_url, ev, "sms")) == ("failed", "cancelled")
    assert _state(_delivery(db_url, ev, "email")) == ("queued", None)    # its email.send still runs
    assert _run(runner, handed)["status"] == "succeeded"
    assert _state(_delivery(db_url, ev, "email")) == ("sent", None)


def test_replaying_a_provider_job_never_moves_a_delivery_past_sent(db_url, sandbox, runner, provider_settings, web):
    """A bounce (a DSN) is final: replaying a dead job of the same message does not reopen it."""
    _, ev, email = _fan_out(db_url, sandbox)
    sandbox.email_outcome(email, "failed")
    job = _hand_over(db_url, runner, ev, "email")
    assert _run(runner, job)["status"] == "succeeded"
    wait_for(lambda: _delivery(db_url, ev, "email")["status"] == "bounced", timeout=10, message="the DSN")
    with connect(db_url) as c:
        c.execute("UPDATE jobs SET status = 'dead', last_error_code = 'smtp_550' WHERE id = %s", (job["id"],))
    replayed, after = _replay(db_url, job)
    assert "reopened" not in after
    assert _delivery(db_url, ev, "email")["status"] == "bounced"


# ---------------------------------------------------------------- where people see it


def test_the_states_show_in_the_inbox_api_and_on_the_ops_deliveries_page(db_url, sandbox, runner, provider_settings,
                                                                         web, login_as, client):
    from opsboard.notifications import inbox
    tenant, ev, email = _fan_out(db_url, sandbox)
    sandbox.email_outcome(email, "failed")
    assert _run(runner, _hand_over(db_url, runner, ev, "email"))["status"] == "succeeded"
    sandbox.fault("/sms/messages", status=400)
    assert _run(runner, _hand_over(db_url, runner, ev, "sms"))["status"] == "dead"
    with connect(db_url) as c:
        n = c.execute("SELECT id, recipient_id FROM notifications WHERE event_id = %s", (ev,)).fetchone()
        secret, _ = inbox.create_token(c, n["recipient_id"])
    r = web.test_client().get(f"/api/v1/inbox/{n['id']}", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 200
    assert r.json["deliveries"] == {"inbox": "delivered", "email": "bounced", "sms": "failed", "push": "suppressed"}
    login_as("ops")
    page = client.get("/deliveries/").get_data(as_text=True)
    assert f'data-channel="email" data-status="bounced"' in page and "dsn_5.1.1" in page
    assert f'data-channel="sms" data-status="failed"' in page


def test_the_sandbox_takes_email_outcomes_over_http(sandbox):
    """Another process (the demo, a journey) sets an outcome through the control API."""
    import json
    import urllib.request
    req = urllib.request.Request(f"{sandbox.url}/_sandbox/email/outcomes", method="POST",
                                 data=json.dumps({"address": "Gone@Example.test", "action": "failed"}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 201
    assert sandbox.state.email_outcomes["gone@example.test"] == ("failed", "5.1.1")
    bad = urllib.request.Request(f"{sandbox.url}/_sandbox/email/outcomes", method="POST",
                                 data=json.dumps({"address": "x", "action": "lost"}).encode())
    try:
        urllib.request.urlopen(bad, timeout=5)
        raise AssertionError("expected a 400")
    except urllib.error.HTTPError as exc:
        assert exc.code == 400
