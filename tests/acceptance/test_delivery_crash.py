"""The at-most-once acceptance test: SIGKILL the worker after the provider accepted and before
the job's success was recorded; after recovery the provider has one SMS per client id and one
webhook per webhook-id that a receiver acts on, and the job ends succeeded."""
from __future__ import annotations

import signal

import pytest

from opsboard import auth
from opsboard.deliveries import messages, webhooks
from tests.conftest import connect, wait_for
from tests.support.delivery import insert_event
from tests.support.sandbox import sandbox  # noqa: F401
from worker.services.reaper import Reaper

pytestmark = pytest.mark.chaos


def _env(sb) -> dict:
    return {"OPSBOARD_LEASE_SECONDS": "2", "OPSBOARD_POLL_INTERVAL": "0.2", "OPSBOARD_SMS_URL": f"{sb.url}/sms",
            "OPSBOARD_SMS_KEY": sb.sms_key, "OPSBOARD_WEBHOOK_ALLOW": "127.0.0.1"}


def _status(c, job_id):
    return c.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()["status"]


def _kill_after_accept_then_recover(db_url, c, sandbox, start_worker, job_id, route, kind, queues):
    # The sandbox records the request, then holds the answer: the worker is killed in that window.
    sandbox.fault(route, "latency", hold_ms=60_000, count=1)
    a = start_worker(db_url, "--queues", queues, "--no-services", **_env(sandbox))
    wait_for(lambda: len(sandbox.records(kind)) == 1, timeout=30, message="the provider to accept")
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    assert _status(c, job_id) == "running"  # success was never recorded
    reaper = Reaper()
    wait_for(lambda: reaper.run_once(c) >= 1, timeout=20, interval=0.1, message="the lease to run out")
    start_worker(db_url, "--queues", queues, **_env(sandbox))
    wait_for(lambda: _status(c, job_id) == "succeeded", timeout=30, message="the job to succeed after recovery")


def test_sms_sent_once_across_a_sigkill(db_url, sandbox, start_worker):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        sent = messages.send_sms(c, t, "+15550001234", "notice", {"subject": "", "text": "shipped"})
        _kill_after_accept_then_recover(db_url, c, sandbox, start_worker, sent["job"]["id"], "/sms/messages",
                                        "sms", "default=2")
        recs = sandbox.records("sms")
        assert [r["client_id"] for r in recs] == [str(sent["message"]["id"])]  # exactly one SMS
        job = c.execute("SELECT attempts FROM jobs WHERE id = %s", (sent["job"]["id"],)).fetchone()
        assert job["attempts"] == 2
        assert c.execute("SELECT state, provider_ref FROM effects").fetchone() == {
            "state": "confirmed", "provider_ref": recs[0]["id"]}


def test_webhook_acted_on_once_across_a_sigkill(db_url, sandbox, start_worker):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ep = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/crash")
        ev = insert_event(c, t)
        (job,) = webhooks.fanout(c, ev)
        _kill_after_accept_then_recover(db_url, c, sandbox, start_worker, job["id"], "/hooks/crash", "webhook",
                                        "default=2")
        recs = sandbox.records("webhook")
        # Re-sent with the same webhook-id: a receiver that dedupes on it acts exactly once.
        assert len(recs) == 2 and {r["webhook_id"] for r in recs} == {webhooks.message_id(ev)}
        for r in recs:
            webhooks.verify(ep["secrets"], r["headers"], r["body"].encode())
        assert c.execute("SELECT state FROM effects").fetchone()["state"] == "confirmed"
