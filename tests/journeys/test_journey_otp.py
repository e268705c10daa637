"""Journey 2: one-time passwords through the real processes.

``POST /api/v1/otp`` (gunicorn) → an ``sms.otp`` job on the critical queue → ``python -m worker`` →
the sandbox's SMS gateway; the code from the SMS verifies over the API.  Around it: a code whose
time ran out before any worker ran is never sent (the expiry service kills its job); the critical
queue sends while the default queue's only slot is busy; a worker SIGKILLed after the gateway
accepted the SMS and before success was recorded is replaced, and the new worker reconciles by
client id: exactly one SMS per OTP at the gateway.
"""
from __future__ import annotations

import re
import signal
import uuid

import pytest

from opsboard import auth
from tests.conftest import wait_for
from tests.journeys.helpers import api_key

pytestmark = pytest.mark.chaos

LATE, ON_TIME = "+15550002001", "+15550002002"


def _job(c, job_id):
    return c.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def test_otp_sent_once_never_when_expired_and_reconciled_after_a_crash(stack, sandbox):
    with stack.db() as c:
        tenant = auth.ensure_tenant(c, "acme")
        key = api_key(c, tenant["id"])
    stack.web()

    # ---- a code whose time runs out before any worker runs
    late = stack.api("POST", "/api/v1/otp", key, {"phone": LATE}, headers={"Idempotency-Key": "otp-late"})
    assert late.status == 202, late.body
    with stack.db() as c:
        job = _job(c, uuid.UUID(late.body["job_id"]))
        assert (job["type"], job["queue"], job["status"]) == ("sms.otp", "critical", "pending")
        assert job["expires_at"] == c.execute("SELECT expires_at FROM otp_requests WHERE id = %s",
                                              (uuid.UUID(late.body["otp_id"]),)).fetchone()["expires_at"]
        # The two minutes pass with every worker stopped: the clock's only stand-in, both rows moved
        # back by the code's lifetime (as if requested 121 s ago).
        c.execute("UPDATE otp_requests SET created_at = created_at - interval '121 s', "
                  "expires_at = expires_at - interval '121 s' WHERE id = %s", (uuid.UUID(late.body["otp_id"]),))
        c.execute("UPDATE jobs SET created_at = created_at - interval '121 s', "
                  "expires_at = expires_at - interval '121 s' WHERE id = %s", (job["id"],))

    # ---- a worker with one default slot (kept busy) and one critical slot; the gateway records the
    # next SMS and holds its answer back: the worker is killed in that window.
    sandbox.fault("/sms/messages", "latency", hold_ms=60_000, count=1)
    first = stack.worker("--queues", "critical=1,default=1")
    busy = stack.api("POST", "/api/v1/jobs", key, {"type": "diag.sleep", "payload": {"ms": 10000}})
    assert busy.status == 202, busy.body
    with stack.db() as c:
        wait_for(lambda: _job(c, uuid.UUID(busy.body["id"]))["status"] == "running", timeout=20,
                 message="the default queue's only slot to be busy")
    sent = stack.api("POST", "/api/v1/otp", key, {"phone": ON_TIME}, headers={"Idempotency-Key": "otp-on-time"})
    assert sent.status == 202, sent.body
    wait_for(lambda: len(sandbox.records("sms")) == 1, timeout=20, message="the gateway to accept the OTP SMS")
    with stack.db() as c:
        # The critical queue's own slot sent it while the default queue was still busy.
        assert _job(c, uuid.UUID(busy.body["id"]))["status"] == "running"
        assert _job(c, uuid.UUID(sent.body["job_id"]))["status"] == "running"
        # The expiry service (leader) killed the late code's job; it never ran.
        wait_for(lambda: _job(c, uuid.UUID(late.body["job_id"]))["status"] == "dead", timeout=20,
                 message="the expired OTP's job to be dead")
    first.send_signal(signal.SIGKILL)
    first.wait(10)

    # ---- a new worker: the lease runs out, the job runs again and asks the gateway by client id
    stack.worker()
    with stack.db() as c:
        wait_for(lambda: _job(c, uuid.UUID(sent.body["job_id"]))["status"] == "succeeded"
                 and _job(c, uuid.UUID(busy.body["id"]))["status"] == "succeeded", timeout=40,
                 message="the OTP job to succeed after the crash, and the sleep to end")

    (sms,) = sandbox.records("sms")                                       # exactly one SMS, ever
    assert (sms["to"], sms["client_id"]) == (ON_TIME, sent.body["message_id"])
    assert not [r for r in sandbox.records("sms") if r["to"] == LATE]    # the expired code: never sent
    code = re.search(r"\b(\d{6})\b", sms["text"]).group(1)
    assert stack.api("POST", f"/api/v1/otp/{sent.body['otp_id']}/verify", key, {"code": code}).body == {
        "verified": True}
    refused = stack.api("POST", f"/api/v1/otp/{late.body['otp_id']}/verify", key, {"code": "000000"})
    assert (refused.status, refused.body["error"]) == (410, "otp_expired")

    # ---- every row the journey touched
    with stack.db() as c:
        late_job, sent_job = _job(c, uuid.UUID(late.body["job_id"])), _job(c, uuid.UUID(sent.body["job_id"]))
        assert (late_job["status"], late_job["last_error_code"], late_job["attempts"]) == ("dead", "expired", 0)
        assert (sent_job["status"], sent_job["queue"], sent_job["attempts"]) == ("succeeded", "critical", 2)
        assert [(a["attempt"], a["outcome"]) for a in c.execute(
            "SELECT attempt, outcome FROM job_attempts WHERE job_id = %s ORDER BY attempt",
            (sent_job["id"],)).fetchall()] == [(1, "lease_expired"), (2, "succeeded")]
        # The sleep died with the first worker too, and ran again.
        assert _job(c, uuid.UUID(busy.body["id"]))["attempts"] == 2
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 3

        otps = {str(o["id"]): o for o in c.execute("SELECT * FROM otp_requests").fetchall()}
        assert set(otps) == {late.body["otp_id"], sent.body["otp_id"]}
        assert (otps[late.body["otp_id"]]["verified_at"], otps[late.body["otp_id"]]["attempts"]) == (None, 0)
        assert otps[sent.body["otp_id"]]["verified_at"] is not None and otps[sent.body["otp_id"]]["attempts"] == 1

        msgs = {str(m["id"]): m for m in c.execute("SELECT * FROM outbound_messages").fetchall()}
        assert set(msgs) == {late.body["message_id"], sent.body["message_id"]}
        done, never = msgs[sent.body["message_id"]], msgs[late.body["message_id"]]
        assert (done["status"], done["provider_ref"], done["template"]) == ("sent", sms["id"], "otp")
        assert done["params"] == {}                                      # the code is erased once sent
        assert (never["status"], never["provider_ref"], never["sent_at"]) == ("queued", None, None)
        (effect,) = c.execute("SELECT * FROM effects").fetchall()
        assert (effect["job_id"], effect["state"], effect["provider_ref"]) == (sent_job["id"], "confirmed", sms["id"])

        assert sorted(i["key"] for i in c.execute("SELECT key FROM api_idempotency").fetchall()) == [
            "otp-late", "otp-on-time"]
        assert [a["action"] for a in c.execute("SELECT action FROM audit_log").fetchall()] == ["apikey.create"]
