"""Journey 4: alerts reach the on-call ops staff through the real processes.

``python -m worker``'s leader runs the alert service.  A dead-letter spike (11 jobs dead through the
worker) opens a ``dead_rising`` warning: ``alert.opened`` → the operator tenant's ops staff on inbox,
email and push; Leila is inside her quiet hours, so her email and push wait for the window's end (her
inbox row does not).  Then the default queue loses its worker while a job waits there: a critical
``no_worker`` alert (``alert.critical``) reaches both at once -- inbox, email, push and SMS, quiet
hours or not -- through the critical queue alone (the queue that has no worker cannot be the one
that carries the news); Sam, whose inbox is open in chromium, sees it arrive live.
"""
from __future__ import annotations

import signal
from collections import Counter
from datetime import datetime, timedelta

import pytest

from opsboard import auth, jobqueue
from opsboard.notifications import preferences
from tests.conftest import wait_for
from tests.journeys.helpers import (assert_delivery_final, api_key, email_parts, login, member, user_token,
                                    watch_problems)

pytestmark = [pytest.mark.chaos, pytest.mark.browser]

LEILA_PHONE, SAM_PHONE = "+989121110041", "+15550004242"


def _alerts(c):
    return {a["rule"]: a for a in c.execute("SELECT * FROM alerts").fetchall()}


def test_dead_spike_and_no_worker_alerts_reach_oncall_staff(stack, sandbox, browser, shots):
    with stack.db() as c:
        auth.ensure_tenant(c, "operator", is_operator=True)
        acme = auth.ensure_tenant(c, "acme")
        key = api_key(c, acme["id"])
        leila = member(c, "operator", "leila@ops.test", role="ops", locale="fa", phone=LEILA_PHONE)
        sam = member(c, "operator", "sam@ops.test", role="admin", locale="en", phone=SAM_PHONE)
        now = c.execute("SELECT now() AS n").fetchone()["n"]
        # Leila's quiet hours: from an hour ago to an hour from now (UTC), every day.
        quiet_start, quiet_end = (now - timedelta(hours=1)).time(), (now + timedelta(hours=1)).time()
        preferences.set_quiet_hours(c, leila["id"], "UTC", quiet_start.replace(microsecond=0),
                                    quiet_end.replace(microsecond=0))
        tokens = {"leila": user_token(c, leila["id"]), "sam": user_token(c, sam["id"])}
    stack.web()
    for who in ("leila", "sam"):
        assert stack.api("POST", "/api/v1/devices", tokens[who], sandbox.new_push_subscription()).status == 201

    # ---- a dead-letter spike through the worker: a warning, quiet hours respected
    first = stack.worker("--queues", "critical=2,default=4")
    with stack.db() as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM workers WHERE state = 'running'").fetchone()["n"],
                 timeout=20, message="the worker registered")
        dead = [jobqueue.enqueue(c, "test.permanent", {}, tenant=acme["id"], max_attempts=1)["id"]
                for _ in range(11)]
        wait_for(lambda: "dead_rising" in _alerts(c), timeout=40, message="the dead_rising alert")
    wait_for(lambda: {r["rcpt_to"][0] for r in sandbox.records("email")} == {"sam@ops.test"}
             and len(sandbox.records("push")) == 1, timeout=30, message="Sam's warning email and push")
    with stack.db() as c:
        warning = _alerts(c)["dead_rising"]
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM notification_deliveries WHERE status = 'queued'").fetchone()["n"] == 2
                 and c.execute("SELECT count(*) AS n FROM notification_deliveries WHERE status <> 'queued'").fetchone()["n"] == 4,
                 timeout=20, message="the warning's deliveries settled")
    (mail,) = sandbox.records("email")
    assert mail["subject"] == "Warning alert: dead_rising (all)"
    assert f'href="/alerts/{warning["id"]}"' in email_parts(mail)[1]

    # Sam watches his inbox in the browser: the warning is there, the stream live.
    page = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB").new_page()
    problems = watch_problems(page)
    login(page, stack.url, "sam@ops.test")
    page.goto(f"{stack.url}/inbox/")
    assert "Warning alert: dead_rising (all)" in page.locator("#inbox-items").inner_text()
    page.locator('#live-status[data-live="1"]').wait_for(timeout=20_000)

    # ---- the default queue loses its worker while a job waits there: critical, at once, quiet hours or not
    first.send_signal(signal.SIGTERM)
    first.wait(30)
    waiting = stack.api("POST", "/api/v1/jobs", key, {"type": "diag.noop", "payload": {}})
    assert waiting.status == 202, waiting.body
    stack.worker("--queues", "critical=2")
    wait_for(lambda: len(sandbox.records("sms")) == 2 and len(sandbox.records("email")) == 3
             and len(sandbox.records("push")) == 3, timeout=40,
             message="the critical alert's SMS, emails and pushes to both")

    with stack.db() as c:
        # settled: nothing runs, and what is still pending waits for a default worker or a later time
        wait_for(lambda: c.execute(
            "SELECT count(*) AS n FROM jobs WHERE status IN ('running', 'retryable') OR (status = 'pending' "
            "AND queue = 'critical')").fetchone()["n"] == 0, timeout=30, message="the critical work settled")
    page.locator("#inbox-items li.inbox-item.new", has_text="Critical alert: no_worker (default)").wait_for(
        timeout=30_000)                                                    # live, without a reload
    shots(page, "critical-alert-live")
    assert problems == []
    sms = {r["to"]: r["text"] for r in sandbox.records("sms")}
    assert set(sms) == {LEILA_PHONE, SAM_PHONE}
    assert sms[SAM_PHONE] == "opsboard critical: no live worker serves default, which has ready jobs"
    # Persian written from the alert's parts, the product's name and the queue as left-to-right islands (issue 43)
    assert sms[LEILA_PHONE] == "بحرانی \u2066opsboard\u2069: هیچ کارگر زنده‌ای به \u2066default\u2069 که کار آماده دارد، سرویس نمی‌دهد"
    mails = [r for r in sandbox.records("email") if "no_worker" in r["subject"] or "صف بدون کارگر" in r["subject"]]
    assert sorted(r["rcpt_to"][0] for r in mails) == ["leila@ops.test", "sam@ops.test"]

    # ---- every row the journey touched
    with stack.db() as c:
        alerts = _alerts(c)
        assert set(alerts) == {"dead_rising", "no_worker"}
        assert (alerts["dead_rising"]["severity"], alerts["dead_rising"]["closed_at"]) == ("warning", None)
        assert (alerts["no_worker"]["severity"], alerts["no_worker"]["key"], alerts["no_worker"]["closed_at"]) == (
            "critical", "default", None)
        events = {e["type"]: e for e in c.execute("SELECT * FROM outbox_events").fetchall()}
        assert set(events) == {"alert.opened", "alert.critical"} and all(e["relayed_at"] for e in events.values())
        assert events["alert.opened"]["payload"]["alert_id"] == str(alerts["dead_rising"]["id"])
        assert events["alert.critical"]["payload"]["alert_id"] == str(alerts["no_worker"]["id"])

        notes = c.execute("SELECT * FROM notifications").fetchall()
        assert sorted((n["event_type"], n["recipient_id"] == leila["id"], n["locale"]) for n in notes) == [
            ("alert.critical", False, "en"), ("alert.critical", True, "fa"),
            ("alert.opened", False, "en"), ("alert.opened", True, "fa")]
        deliveries = {(d["event_type"], d["recipient_id"], d["channel"]): d
                      for d in c.execute("SELECT * FROM notification_deliveries").fetchall()}
        assert len(deliveries) == 14
        quiet_until = datetime.combine(now.date() + timedelta(days=1 if quiet_end < now.time() else 0),
                                       quiet_end.replace(microsecond=0), tzinfo=now.tzinfo)
        for (event_type, user, channel), d in deliveries.items():
            if event_type == "alert.opened" and user == leila["id"] and channel != "inbox":
                # inside her quiet hours: queued until the window ends, its job waiting for that time
                assert (d["status"], d["deferred_until"]) == ("queued", quiet_until), d
                job = c.execute("SELECT status, available_at FROM jobs WHERE id = %s", (d["job_id"],)).fetchone()
                assert (job["status"], job["available_at"]) == ("pending", quiet_until)
            elif (event_type, channel) == ("alert.critical", "sms"):
                # handed over (the phone has it); the receipt is asked for later, by a default-queue job
                # that waits for a default worker like every other default job
                assert (d["status"], d["error_code"], d["deferred_until"]) == ("sent", None, None), d
                assert d["provider_ref"] in {str(m["id"]) for m in c.execute("SELECT id FROM outbound_messages")}
            else:
                assert_delivery_final(d, channel)
                assert d["deferred_until"] is None
        assert {ch for (et, _, ch) in deliveries if et == "alert.critical"} == {"inbox", "email", "push", "sms"}
        assert {ch for (et, _, ch) in deliveries if et == "alert.opened"} == {"inbox", "email", "push"}

        jobs = c.execute("SELECT id, type, queue, status, last_error_code FROM jobs").fetchall()
        assert sorted(j["id"] for j in jobs if j["type"] == "test.permanent") == sorted(dead)
        noop = next(j for j in jobs if j["type"] == "diag.noop")
        assert (noop["queue"], noop["status"]) == ("default", "pending")          # still no default worker
        assert Counter((j["type"], j["queue"], j["status"]) for j in jobs) == Counter({
            ("test.permanent", "default", "dead"): 11,
            ("diag.noop", "default", "pending"): 1,                        # still no default worker
            # the warning: Sam's email and push at once, Leila's deferred to her quiet hours' end
            ("notifications.fanout", "default", "succeeded"): 1,
            ("notifications.deliver", "default", "succeeded"): 2, ("notifications.deliver", "default", "pending"): 2,
            ("email.send", "default", "succeeded"): 1, ("push.send", "default", "succeeded"): 1,
            # the critical alert: everything on the critical queue, for both, at once
            ("notifications.fanout", "critical", "succeeded"): 1,
            ("notifications.deliver_critical", "critical", "succeeded"): 6,
            ("email.send", "critical", "succeeded"): 2, ("push.send", "critical", "succeeded"): 2,
            ("sms.otp", "critical", "succeeded"): 2,
            # the SMS receipts are asked for later, on default: they wait for a default worker
            ("notifications.sms_status", "default", "pending"): 2}), jobs

        audit = Counter(a["action"] for a in c.execute("SELECT action FROM audit_log").fetchall())
        assert audit == Counter({"apikey.create": 1, "alert.open": 2, "auth.login": 1}), audit
        subs = c.execute("SELECT state, last_success_at FROM push_subscriptions").fetchall()
        assert all(s["state"] == "active" and s["last_success_at"] for s in subs)
