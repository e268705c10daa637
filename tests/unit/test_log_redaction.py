"""Log lines go through opsboard.redact: identifiers holding personal data are not written verbatim."""
import json
import logging

from opsboard.logs import JsonFormatter, TextFormatter


def _record(msg="job %s: %s", args=("dead", "http_410"), **extra):
    record = logging.LogRecord("worker.runner", logging.INFO, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_json_log_redacts_identifiers_and_message():
    rec = _record("sent to %s", ("frank@example.com",), correlation_id="signup:frank@example.com",
                  idempotency_key="otp:frank@example.com:42", group_key="user:+989123456789",
                  job_id="0192f0e4-8c1e-7b31-9a55-3f0c4a2b1d00", count=3)
    doc = json.loads(JsonFormatter().format(rec))
    line = json.dumps(doc)
    assert "frank@example.com" not in line and "9123456789" not in line
    assert doc["msg"] == "sent to [email]"
    assert doc["correlation_id"] == "signup:[email]"
    assert doc["idempotency_key"] == "otp:[email]:42"
    assert doc["group_key"] == "user:[phone]"
    assert doc["job_id"] == "0192f0e4-8c1e-7b31-9a55-3f0c4a2b1d00"  # ids kept
    assert doc["count"] == 3


def test_text_log_redacts_too():
    line = TextFormatter().format(_record(correlation_id="card 4111111111111111"))
    assert "4111111111111111" not in line and "[card]" in line


def test_traceback_is_redacted():
    try:
        raise ValueError("no mailbox ali@example.com")
    except ValueError:
        import sys
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    doc = json.loads(JsonFormatter().format(rec))
    assert "ali@example.com" not in doc["exc"] and "[email]" in doc["exc"]
