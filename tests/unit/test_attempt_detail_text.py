"""An attempt's detail is readable and redacted (issue 44): an HTTP failure's status and the start
of its body, an SMTP server's reply, an exception's class, message and innermost frames."""
from __future__ import annotations

import smtplib

from opsboard import retry
from opsboard.deliveries.providers import http, smtp

TOKEN = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def test_an_http_failure_keeps_its_status_and_a_redacted_excerpt_of_the_body():
    body = ('{"error": "invalid_payload", "api_key": "%s", "contact": "alice@example.com", "phone": "+98 912 345 6789"}'
            % TOKEN).encode()
    outcome = http.classify(400, {}, body=body)
    assert isinstance(outcome, retry.Permanent) and outcome.code == "http_400"
    assert outcome.detail.startswith("HTTP 400: ") and "invalid_payload" in outcome.detail
    assert TOKEN not in outcome.detail and "alice@example.com" not in outcome.detail and "912" not in outcome.detail
    retryable = http.classify(503, {}, body=b"<html>\n<body>  upstream\n down </body></html>")
    assert retryable.detail == "HTTP 503: <html> <body> upstream down </body></html>"
    assert http.classify(502, {}, body=b"").detail == "HTTP 502 (empty body)"
    assert isinstance(http.classify(200, {}, body=b"fine"), retry.Success)


def test_a_long_body_is_cut_and_bad_bytes_do_not_fail():
    outcome = http.classify(422, {}, body=b"\xff\xfe" + b"x " * 5000)
    assert len(outcome.detail) <= http.BODY_EXCERPT + len("HTTP 422: ")
    assert outcome.detail.endswith("…")


def test_an_smtp_refusal_keeps_the_servers_reply_redacted():
    outcome = smtp._by_code(550, b"5.1.1 <bob@example.org>: Recipient address rejected: User unknown")
    assert isinstance(outcome, retry.Permanent)
    assert outcome.detail == "SMTP 550: 5.1.1 <[email]>: Recipient address rejected: User unknown"
    assert smtp._by_code(451).detail == "SMTP 451: "
    exc = smtplib.SMTPResponseException(554, b"5.7.1 Message rejected: token=abcdef0123456789abcdef")
    assert "abcdef0123456789" not in smtp._reply(exc.smtp_code, exc.smtp_error)


def test_an_exception_keeps_its_class_message_and_innermost_frames_redacted():
    def load_customer():
        raise KeyError(f"no customer for alice@example.com with password={TOKEN}")

    def handler():
        load_customer()

    try:
        handler()
    except KeyError as exc:
        outcome = retry.classify(exc)
    assert isinstance(outcome, retry.Unknown)
    lines = outcome.detail.splitlines()
    assert lines[0].startswith("KeyError: ")
    assert any("in load_customer" in ln for ln in lines) and any("in handler" in ln for ln in lines)
    assert TOKEN not in outcome.detail and "alice@example.com" not in outcome.detail
    decision = retry.decide(outcome, 1, 1, 1.0, 10.0)
    assert decision.kind == "dead" and "in load_customer" in decision.detail


def test_a_deep_traceback_is_bounded():
    def recurse(n):
        if n == 0:
            raise RuntimeError("x" * 5000)
        recurse(n - 1)

    try:
        recurse(50)
    except RuntimeError as exc:
        detail = retry.exception_detail(exc)
    assert len(detail) <= retry.MAX_STORED_DETAIL
    assert detail.count("in recurse") <= retry.TRACEBACK_FRAMES
