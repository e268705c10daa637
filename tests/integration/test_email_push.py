"""Email over SMTP and Web Push against the sandbox."""
from __future__ import annotations

import dataclasses
import json

import pytest

from opsboard import auth
from opsboard.deliveries import messages
from opsboard.deliveries.messages import InvalidRecipient
from tests.conftest import connect
from tests.support.delivery import provider_settings, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401


def _email(db_url, to="ana@example.test"):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        return messages.send_email(c, t, to, "welcome", {"name": "Ana"})


def test_email_is_sent_with_a_deterministic_message_id(db_url, sandbox, runner, provider_settings):
    sent = _email(db_url)
    assert runner.run(sent["job"]["id"])["status"] == "succeeded"
    (rec,) = sandbox.records("email")
    assert rec["rcpt_to"] == ["ana@example.test"] and rec["subject"] == "Welcome to opsboard"
    assert rec["message_id"] == f"<{sent['message']['id']}@localhost>"
    assert rec["headers"]["x-opsboard-template"] == "welcome/v1"
    assert "Hello Ana" in rec["body"]
    with connect(db_url) as c:
        row = c.execute("SELECT status, provider_ref, template, template_version FROM outbound_messages").fetchone()
    assert row == {"status": "sent", "provider_ref": rec["queue_id"], "template": "welcome", "template_version": 1}


def test_email_credentials_are_used(db_url, sandbox, runner):
    runner.settings = sandbox_settings(sandbox, smtp_user="mailer", smtp_password="s3cret")
    sent = _email(db_url)
    assert runner.run(sent["job"]["id"])["status"] == "succeeded"
    assert sandbox.records("email")[0]["user"] == "mailer"


@pytest.mark.parametrize("code, status", [(421, "retryable"), (451, "retryable"), (452, "retryable"),
                                          (550, "dead"), (554, "dead")])
def test_smtp_4xx_retryable_5xx_permanent(db_url, sandbox, runner, provider_settings, code, status):
    sent = _email(db_url)
    sandbox.fault("smtp", status=code)
    done = runner.run(sent["job"]["id"])
    assert (done["status"], done["last_error_code"]) == (status, f"smtp_{code}")


def test_smtp_connection_refused_and_timeout_are_retryable(db_url, sandbox, runner):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()
    runner.settings = sandbox_settings(sandbox, smtp_port=dead_port)
    sent = _email(db_url)
    done = runner.run(sent["job"]["id"])
    assert (done["status"], done["last_error_code"]) == ("retryable", "smtp_connect_refused")
    # A server that accepts the connection and never greets: bounded by the timeout.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    runner.settings = sandbox_settings(sandbox, smtp_port=silent.getsockname()[1], smtp_timeout=0.5)
    try:
        runner.make_due(sent["job"]["id"])
        done = runner.run(sent["job"]["id"])
    finally:
        silent.close()
    assert (done["status"], done["last_error_code"]) == ("retryable", "smtp_timeout")


def test_email_address_validated_at_enqueue(db_url):
    with pytest.raises(InvalidRecipient):
        _email(db_url, to="not-an-address")


# ---------------------------------------------------------------- Web Push


@pytest.fixture
def push_settings(request, sandbox):
    """Settings with a VAPID key, in the test's ``runner`` (if it has one)."""
    private, _ = messages.generate_vapid_keys()
    s = sandbox_settings(sandbox, vapid_private_key=private)
    if "runner" in request.fixturenames:
        request.getfixturevalue("runner").settings = s
    return s


def _push(db_url, sandbox, title="You have a new message"):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        sub = messages.add_push_subscription(c, t, sandbox.new_push_subscription(), user_ref="user-1",
                                             allow=sandbox_settings(sandbox).webhook_allow)
        job = messages.send_push(c, t, sub["id"], "01930000-0000-7000-8000-000000000123", title)
    return t, sub, job


def test_push_is_encrypted_signed_and_the_sandbox_reads_the_payload(db_url, sandbox, runner, push_settings):
    t, sub, job = _push(db_url, sandbox)
    assert runner.run(job["id"])["status"] == "succeeded"
    (rec,) = sandbox.records("push")
    assert rec["vapid"] and rec["decrypt_error"] is None
    assert json.loads(rec["payload"]) == {"notification_id": "01930000-0000-7000-8000-000000000123", "title": "You have a new message"}
    with connect(db_url) as c:
        assert c.execute("SELECT last_success_at FROM push_subscriptions").fetchone()["last_success_at"] is not None


def test_410_deactivates_the_subscription_for_good(db_url, sandbox, runner, push_settings):
    t, sub, job = _push(db_url, sandbox)
    sandbox.state.subscriptions[sub["endpoint"].rsplit("/", 1)[-1]].gone = True
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == ("dead", "push_410")
    with connect(db_url) as c:
        row = c.execute("SELECT state, invalid_reason FROM push_subscriptions").fetchone()
        assert row == {"state": "invalid", "invalid_reason": "push_410"}
        with pytest.raises(InvalidRecipient):  # never used again
            messages.send_push(c, t, sub["id"], "01930000-0000-7000-8000-000000000124")
    assert len(sandbox.records("push")) == 1


@pytest.mark.parametrize("fault, status, code", [
    ({"status": 429, "retry_after": "30"}, "retryable", "push_429"),
    ({"status": 503}, "retryable", "push_503"),
    ({"status": 400}, "dead", "push_400"),
    ({"status": 404}, "dead", "push_404"),
])
def test_push_fault_classes(db_url, sandbox, runner, push_settings, fault, status, code):
    t, sub, job = _push(db_url, sandbox)
    sandbox.fault("/push/", **fault)
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == (status, code)
    # 404 (like 410) says the subscription is gone: deactivated; other answers leave it active.
    with connect(db_url) as c:
        row = c.execute("SELECT state, invalid_reason FROM push_subscriptions").fetchone()
    assert row == ({"state": "invalid", "invalid_reason": "push_404"} if code == "push_404"
                   else {"state": "active", "invalid_reason": None})


def test_starttls_with_credentials_and_certificate_verification(db_url, runner):
    from opsboard.tools.sandbox import Sandbox
    sb = Sandbox("127.0.0.1", 0, 0, smtp_starttls=True).start()
    try:
        runner.settings = sandbox_settings(sb, smtp_security="starttls", smtp_user="mailer",
                                            smtp_password="s3cret", smtp_ca_file=sb.smtp_ca_file)
        sent = _email(db_url)
        assert runner.run(sent["job"]["id"])["status"] == "succeeded"
        (rec,) = sb.records("email")
        assert rec["tls"] and rec["user"] == "mailer"
        # An untrusted certificate is refused, never sent in clear.
        runner.settings = sandbox_settings(sb, smtp_security="starttls")
        other = _email(db_url, to="bo@example.test")
        done = runner.run(other["job"]["id"])
        assert (done["status"], done["last_error_code"]) == ("dead", "smtp_tls")
        assert len(sb.records("email")) == 1
    finally:
        sb.stop()


def test_a_revoked_subscription_is_never_used(db_url, sandbox, runner, push_settings):
    t, sub, job = _push(db_url, sandbox)
    with connect(db_url) as c:
        assert messages.revoke_push_subscription(c, t, sub["id"])
        with pytest.raises(InvalidRecipient):
            messages.send_push(c, t, sub["id"], "01930000-0000-7000-8000-000000000125")
    done = runner.run(job["id"])  # queued before the revocation
    assert (done["status"], done["last_error_code"]) == ("dead", "subscription_inactive")
    assert sandbox.records("push") == []


def test_implicit_tls_smtp_verifies_the_certificate(db_url, runner):
    from opsboard.tools.sandbox import Sandbox
    sb = Sandbox("127.0.0.1", 0, 0, smtp_ssl=True).start()
    try:
        runner.settings = sandbox_settings(sb, smtp_security="ssl", smtp_user="mailer", smtp_password="s3cret",
                                            smtp_ca_file=sb.smtp_ca_file)
        sent = _email(db_url)
        assert runner.run(sent["job"]["id"])["status"] == "succeeded"
        (rec,) = sb.records("email")
        assert rec["tls"] and rec["user"] == "mailer"
        # Not trusting the certificate: refused, nothing sent.
        runner.settings = sandbox_settings(sb, smtp_security="ssl")
        other = _email(db_url, to="bo@example.test")
        done = runner.run(other["job"]["id"])
        assert (done["status"], done["last_error_code"]) == ("dead", "smtp_tls")
        assert len(sb.records("email")) == 1
        # Plain SMTP to an SMTPS port does not get a message through either.
        runner.settings = sandbox_settings(sb, smtp_security="none", smtp_timeout=1.0)
        third = _email(db_url, to="cy@example.test")
        assert runner.run(third["job"]["id"])["status"] != "succeeded"
        assert len(sb.records("email")) == 1
    finally:
        sb.stop()


def test_a_private_push_endpoint_is_refused_at_subscription(db_url, sandbox, push_settings):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        keys = {"p256dh": "BExample", "auth": "secret"}
        for endpoint in ("http://10.1.2.3/push/x", "http://169.254.169.254/latest", "http://[::1]/push/x",
                         "file:///etc/passwd", "https:///no-host"):
            with pytest.raises(InvalidRecipient):
                messages.add_push_subscription(c, t, {"endpoint": endpoint, "keys": keys}, allow=())
        assert c.execute("SELECT count(*) AS n FROM push_subscriptions").fetchone()["n"] == 0


def test_a_push_endpoint_no_longer_allowed_is_refused_at_send_and_deactivated(db_url, sandbox, runner, push_settings):
    t, sub, job = _push(db_url, sandbox)      # 127.0.0.1 is allow-listed when it is stored
    runner.settings = dataclasses.replace(runner.settings, webhook_allow=())
    done = runner.run(job["id"])
    assert (done["status"], done["last_error_code"]) == ("dead", "push_target_refused")
    assert sandbox.records("push") == []
    with connect(db_url) as c:
        assert c.execute("SELECT state, invalid_reason FROM push_subscriptions").fetchone() == {
            "state": "invalid", "invalid_reason": "push_target_refused"}


def test_push_redirects_are_not_followed(db_url, sandbox, runner, push_settings):
    import http.server
    import threading

    t, sub, job = _push(db_url, sandbox)
    target = sub["endpoint"]

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", target)   # would reach the push service if followed
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with connect(db_url) as c:
            c.execute("UPDATE push_subscriptions SET endpoint = %s WHERE id = %s",
                      (f"http://127.0.0.1:{srv.server_address[1]}/elsewhere", sub["id"]))
        done = runner.run(job["id"])
    finally:
        srv.shutdown()
        srv.server_close()
    assert (done["status"], done["last_error_code"]) == ("dead", "push_307")
    assert sandbox.records("push") == []
