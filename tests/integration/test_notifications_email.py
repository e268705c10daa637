"""Notification email end to end: fan-out -> deliver -> email.send -> the sandbox's SMTP server, MIME parsed."""
from __future__ import annotations

import uuid
from email import message_from_bytes
from email.policy import default as default_policy

from opsboard import auth, outbox
from opsboard.notifications import fanout, preferences, templates
from tests.conftest import connect
from tests.integration.test_notifications import _notice  # noqa: F401  (declares test_notice.sent)
from tests.support.delivery import provider_settings, runner  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401


def _send_to(db_url, runner, locale: str, text: str) -> dict:
    """Fan a notice out to one user of ``locale``, run its deliver job then its email.send job."""
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "acme")
        if not templates.live(c, "test_notice.sent"):
            templates.seed(c, "test_notice.sent", "email", "fa", "پیام: {{ text }}",
                           "<p>سلام، {{ text }}</p>", "text", {"text": "x"})
            templates.seed(c, "test_notice.sent", "email", "en", "Notice: {{ text }}",
                           "<p>Hello, {{ text }}</p>", "text", {"text": "x"})
        u = auth.create_user(c, f"{locale}-{uuid.uuid4().hex[:6]}@example.test", "correct horse battery",
                             "support_agent", "acme")
        preferences.set_profile(c, u["id"], locale=locale)
        with c.transaction():
            ev = outbox.publish(c, "test_notice.sent", 1, aggregate=("notice", uuid.uuid4().hex),
                                tenant=tenant["id"], payload={"user_ids": [str(u["id"])], "text": text})
        fanout.fan_out(c, ev["id"])
        deliver = c.execute("SELECT job_id FROM deliveries WHERE event_id = %s AND channel = 'email'",
                            (ev["id"],)).fetchone()["job_id"]
    assert runner.run(deliver)["status"] == "succeeded"
    with connect(db_url) as c:
        job = c.execute("SELECT id FROM jobs WHERE type = 'email.send' AND status = 'pending'").fetchone()
    done = runner.run(job["id"])
    assert done["status"] == "succeeded", (done["last_error_code"], getattr(runner, "last_outcome", None))
    return u


def _parts(rec):
    msg = message_from_bytes(rec["raw"].encode("utf-8"), policy=default_policy)
    assert msg.get_content_type() == "multipart/alternative"
    return msg, {p.get_content_type(): p.get_content() for p in msg.iter_parts()}


def test_persian_email_is_multipart_alternative_with_an_rtl_html_part(db_url, sandbox, runner, provider_settings):
    _send_to(db_url, runner, "fa", "<b>۱۲</b> & co")
    (rec,) = sandbox.records("email")
    # Longer than one SMTP line (1,001 bytes): passes only because lines end in CRLF.
    assert len(rec["raw"].encode()) > 1001 and "\r\n" in rec["raw"]
    msg, parts = _parts(rec)
    assert list(parts) == ["text/plain", "text/html"]            # the text first: the HTML is preferred
    assert msg["Subject"] == "پیام: <b>۱۲</b> & co"
    html = parts["text/html"]
    assert '<html lang="fa" dir="rtl">' in html and '<div dir="rtl" lang="fa"' in html
    assert "&lt;b&gt;۱۲&lt;/b&gt; &amp; co" in html and "<b>" not in html      # autoescaped
    assert parts["text/plain"].strip() == "سلام، <b>۱۲</b> & co"               # tags of the template gone
    assert rec["body"].strip() == "سلام، <b>۱۲</b> & co"


def test_english_email_html_is_left_to_right(db_url, sandbox, runner, provider_settings):
    _send_to(db_url, runner, "en", "ready")
    (rec,) = sandbox.records("email")
    _, parts = _parts(rec)
    assert '<html lang="en" dir="ltr">' in parts["text/html"] and "<p>Hello, ready</p>" in parts["text/html"]
    assert 'dir="rtl"' not in parts["text/html"]
    assert parts["text/plain"].strip() == "Hello, ready"
