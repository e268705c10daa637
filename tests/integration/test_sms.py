"""SMS through the gateway adapter: client ids, E.164 at enqueue, OTP on critical and expiring,
fault classes, and reconciliation of a started send by status query (never a blind resend)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from opsboard import auth
from opsboard.deliveries import messages
from opsboard.deliveries.messages import InvalidRecipient
from tests.conftest import connect
from tests.support.delivery import provider_settings, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401


def _sms(db_url, otp=False, to="+989121234567"):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        if otp:
            return messages.send_sms(c, t, to, "otp", {"code": "424242", "minutes": 2}, otp=True, expires_in=120)
        return messages.send_sms(c, t, to, "notice", {"subject": "", "text": "Your order shipped"})


def test_sends_with_client_id_and_keeps_the_gateway_id(db_url, sandbox, runner, provider_settings):
    sent = _sms(db_url)
    done = runner.run(sent["job"]["id"])
    assert done["status"] == "succeeded"
    (rec,) = sandbox.records("sms")
    assert rec["client_id"] == str(sent["message"]["id"]) and rec["text"] == "Your order shipped"
    with connect(db_url) as c:
        msg = c.execute("SELECT status, provider_ref FROM outbound_messages").fetchone()
        assert msg == {"status": "sent", "provider_ref": rec["id"]}
        assert c.execute("SELECT state, provider_ref FROM effects").fetchone() == {"state": "confirmed",
                                                                                  "provider_ref": rec["id"]}


def test_otp_goes_to_critical_expires_and_its_code_is_erased(db_url, sandbox, runner, provider_settings):
    sent = _sms(db_url, otp=True)
    job = sent["job"]
    assert job["queue"] == "critical" and job["type"] == "sms.otp" and job["expires_at"] is not None
    assert timedelta(seconds=100) < job["expires_at"] - job["created_at"] <= timedelta(seconds=130)
    assert "424242" not in str(job["payload"])  # the payload carries the message id only
    assert runner.run(job["id"], "critical")["status"] == "succeeded"
    assert "424242" in sandbox.records("sms")[0]["text"]
    with connect(db_url) as c:
        assert c.execute("SELECT params FROM outbound_messages").fetchone()["params"] == {}


@pytest.mark.parametrize("to", ["09121234567", "+0123456789", "+98 912 123", "not a number", "+1234"])
def test_numbers_are_validated_at_enqueue_and_never_echoed(db_url, to):
    with pytest.raises(InvalidRecipient) as e:
        _sms(db_url, to=to)
    assert to not in str(e.value) and e.value.code == "invalid_recipient"
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize("fault, status, code", [
    ({"kind": "status", "status": 503, "retry_after": "30"}, "retryable", "sms_503"),
    ({"kind": "status", "status": 429, "retry_after": "30"}, "retryable", "sms_429"),
    ({"kind": "status", "status": 400}, "dead", "sms_400"),
    ({"kind": "status", "status": 401}, "dead", "sms_401"),
    ({"kind": "reset"}, "retryable", "sms_connection_reset"),
    ({"kind": "timeout"}, "retryable", "sms_timeout"),
])
def test_fault_classes(db_url, sandbox, runner, fault, status, code):
    runner.settings = sandbox_settings(sandbox, sms_timeout=0.5)
    sent = _sms(db_url)
    sandbox.fault("/sms/messages", **fault)
    done = runner.run(sent["job"]["id"])
    assert (done["status"], done["last_error_code"]) == (status, code)
    if status == "retryable" and fault["kind"] == "status":  # refused: the retry sends it, once
        sandbox.clear_faults()
        runner.make_due(sent["job"]["id"])
        assert runner.run(sent["job"]["id"])["status"] == "succeeded"
        assert [r["refused"] for r in sandbox.records("sms")] == [True, False]
    with connect(db_url) as c:  # the number is in no error code or detail
        rows = c.execute("SELECT error_code, detail FROM job_attempts").fetchall()
    assert rows and all("9121234567" not in f"{r['error_code']} {r['detail']}" for r in rows)


def test_a_started_send_is_reconciled_by_status_query_not_resent(db_url, sandbox, runner, provider_settings):
    sent = _sms(db_url)
    sandbox.fault("/sms/messages", "drop", count=1)  # the gateway accepted; we never heard back
    first = runner.run(sent["job"]["id"])
    assert (first["status"], first["last_error_code"]) == ("retryable", "sms_connection_dropped")
    runner.make_due(sent["job"]["id"])
    assert runner.run(sent["job"]["id"])["status"] == "succeeded"
    recs = sandbox.records("sms")
    assert len(recs) == 1  # found by client id: not sent twice
    with connect(db_url) as c:
        assert c.execute("SELECT provider_ref FROM outbound_messages").fetchone()["provider_ref"] == recs[0]["id"]


def test_no_blind_resend_when_the_status_query_fails(db_url, sandbox, runner, provider_settings):
    sent = _sms(db_url)
    sandbox.fault("/sms/messages", "timeout", count=1)
    assert runner.run(sent["job"]["id"])["status"] == "retryable"
    sandbox.fault("/sms/status", status=503, count=1)
    runner.make_due(sent["job"]["id"])
    again = runner.run(sent["job"]["id"])
    assert (again["status"], again["last_error_code"]) == ("retryable", "sms_status_503")
    assert sandbox.records("sms") == []
    runner.make_due(sent["job"]["id"])
    assert runner.run(sent["job"]["id"])["status"] == "succeeded"  # not found: sent now, once
    assert len(sandbox.records("sms")) == 1


def test_the_gateway_breaker_opens_and_later_sms_wait_without_spending_attempts(db_url, sandbox, runner):
    runner.settings = sandbox_settings(sandbox, breaker_failures=3)
    jobs = [_sms(db_url)["job"] for _ in range(5)]
    sandbox.fault("/sms/messages", status=503)
    for j in jobs[:3]:
        assert runner.run(j["id"])["status"] == "retryable"
    for j in jobs[3:]:
        done = runner.run(j["id"])
        assert (done["status"], done["attempts"], done["last_error_code"]) == ("pending", 0, "circuit_open")
    recs = sandbox.records("sms")
    assert len(recs) == 3 and all(r["refused"] and r["answered"] == 503 for r in recs)
    with connect(db_url) as c:
        assert c.execute("SELECT state FROM circuit_breakers WHERE name = 'provider:sms_gateway'"
                         ).fetchone()["state"] == "open"
