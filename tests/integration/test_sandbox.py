"""The provider sandbox: records everything, dedupes nothing, injects faults per route."""
from __future__ import annotations

import http.client
import json
import smtplib
import socket
import subprocess
import sys
import time
from email.message import EmailMessage

import pytest

from tests.conftest import wait_for
from tests.support.sandbox import sandbox  # noqa: F401  (fixture)


def _post(sb, path, body, headers=None, timeout=5.0):
    c = http.client.HTTPConnection("127.0.0.1", sb.http_port, timeout=timeout)
    c.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def _get(sb, path):
    c = http.client.HTTPConnection("127.0.0.1", sb.http_port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def test_webhook_receiver_records_duplicates(sandbox):
    for _ in range(2):
        status, _, _ = _post(sandbox, "/hooks/a", {"x": 1}, {"webhook-id": "msg_1"})
        assert status == 200
    recs = sandbox.records("webhook")
    assert [r["webhook_id"] for r in recs] == ["msg_1", "msg_1"]  # no dedupe: both visible
    status, data = _get(sandbox, "/_sandbox/records?kind=webhook&route=/hooks/a")
    assert status == 200 and len(json.loads(data)["records"]) == 2
    status, page = _get(sandbox, "/_sandbox/")
    assert status == 200 and b"msg_1" in page


def test_status_faults_with_retry_after_and_count(sandbox):
    status, _, body = _post(sandbox, "/_sandbox/faults",
                            {"route": "/hooks/b", "kind": "status", "status": 429, "retry_after": "7", "count": 1})
    assert status == 201
    status, headers, _ = _post(sandbox, "/hooks/b", {})
    assert status == 429 and headers["Retry-After"] == "7"
    assert _post(sandbox, "/hooks/b", {})[0] == 200  # count used up
    # The most specific route wins; other routes are unaffected.
    sandbox.fault("/hooks/", status=500)
    sandbox.fault("/hooks/c", status=410)
    assert _post(sandbox, "/hooks/c", {})[0] == 410
    assert _post(sandbox, "/hooks/d", {})[0] == 500
    sandbox.clear_faults()
    assert _post(sandbox, "/hooks/d", {})[0] == 200


def test_bad_fault_is_a_400_with_a_code(sandbox):
    status, _, body = _post(sandbox, "/_sandbox/faults", {"route": "/x", "kind": "explode"})
    assert status == 400 and json.loads(body)["error"] == "invalid_fault"


def test_reset_drop_and_timeout(sandbox):
    sandbox.fault("/hooks/reset", "reset")
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
        _post(sandbox, "/hooks/reset", {})
    assert sandbox.records(route="/hooks/reset") == []
    # Accept then drop: recorded, but the client gets no answer.
    sandbox.fault("/hooks/drop", "drop")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        _post(sandbox, "/hooks/drop", {}, {"webhook-id": "msg_d"})
    assert [r["webhook_id"] for r in sandbox.records(route="/hooks/drop")] == ["msg_d"]
    sandbox.fault("/hooks/slow", "timeout")
    t = time.monotonic()
    with pytest.raises(socket.timeout):
        _post(sandbox, "/hooks/slow", {}, timeout=0.3)
    assert time.monotonic() - t < 2


def test_sms_gateway_send_and_status_by_client_id(sandbox):
    auth = {"Authorization": "Bearer sandbox-sms-key"}
    assert _post(sandbox, "/sms/messages", {"client_id": "c1", "to": "+15550001", "text": "hi"})[0] == 401
    status, _, body = _post(sandbox, "/sms/messages", {"client_id": "c1", "to": "+15550001", "text": "hi"}, auth)
    assert status == 202 and json.loads(body)["client_id"] == "c1"
    status, data = _get(sandbox, "/sms/messages?client_id=c1")
    assert status == 200 and [m["client_id"] for m in json.loads(data)["messages"]] == ["c1"]
    assert json.loads(_get(sandbox, "/sms/messages?client_id=nope")[1])["messages"] == []


def test_smtp_records_and_injects_reply_codes(sandbox):
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"], msg["Message-ID"] = "a@example.test", "b@example.test", "Hi", "<m1@x>"
    msg.set_content("hello")
    with smtplib.SMTP("127.0.0.1", sandbox.smtp_port, timeout=5) as s:
        s.login("user", "pass")
        s.send_message(msg)
    (rec,) = sandbox.records("email")
    assert rec["message_id"] == "<m1@x>" and rec["body"].strip() == "hello" and rec["rcpt_to"] == ["b@example.test"]
    sandbox.fault("smtp", status=451, count=1)
    with smtplib.SMTP("127.0.0.1", sandbox.smtp_port, timeout=5) as s:
        with pytest.raises(smtplib.SMTPDataError) as e:
            s.send_message(msg)
    assert e.value.smtp_code == 451


def test_opsboard_sandbox_command_serves(tmp_path):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    http_port = port.getsockname()[1]
    port.close()
    p = subprocess.Popen([sys.executable, "-m", "opsboard.cli", "sandbox", "--http-port", str(http_port),
                          "--smtp-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def up():
            try:
                c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=1)
                c.request("GET", "/_sandbox/records")
                return c.getresponse().status == 200
            except OSError:
                return False
        wait_for(up, timeout=20, message="opsboard sandbox to answer")
    finally:
        p.terminate()
        p.wait(10)
