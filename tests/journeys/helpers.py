"""What the journeys share: people, templates, reading what the sandbox received, and the one place
that says which final state a delivery reaches on a success path at the sandbox."""
from __future__ import annotations

import uuid
from email import message_from_bytes
from email.policy import default as default_policy

from opsboard import apikeys, audit, auth
from opsboard.notifications import inbox, preferences, templates

PASSWORD = "correct horse battery"
AUTHOR = audit.Actor("journey-author")

#: The state a delivery row ends in when the sandbox accepted it (and, for SMS, its status query
#: answered ``delivered``).  ONE place to change when the delivery state machine changes:
#: email stays ``sent`` (SMTP gives no receipt); SMS becomes ``delivered`` from the gateway's receipt;
#: a Web Push accepted by the push service is ``sent`` (Web Push has no receipt); the inbox row is ``delivered`` when written.
SUCCESS_STATE = {"inbox": "delivered", "email": "sent", "sms": "delivered", "push": "sent"}


def assert_delivery_final(row: dict, channel: str) -> None:
    """A ``deliveries`` row of ``channel`` ended as a success at the sandbox leaves it."""
    assert row["channel"] == channel
    assert (row["status"], row["error_code"], row["suppression_reason"]) == (SUCCESS_STATE[channel], None, None), row
    if channel != "inbox":
        assert row["provider_ref"], row


def member(c, slug: str, email: str, *, role: str = "member", locale: str | None = None,
           phone: str | None = None, time_zone: str | None = None) -> dict:
    user = auth.create_user(c, email, PASSWORD, role, slug)
    if locale or phone or time_zone:
        preferences.set_profile(c, user["id"], locale=locale, phone=phone, time_zone=time_zone)
    return user


def user_token(c, user_id) -> str:
    return inbox.create_token(c, user_id)[0]


def api_key(c, tenant_id) -> str:
    return apikeys.create(c, tenant_id, "journey", audit.Actor("journey-admin"))[0]


def publish(c, key: str, channel: str, locale: str, subject: str, body: str, variables: str,
            sample: dict) -> dict:
    """A draft saved and published through the audited authoring path (``template.publish``)."""
    draft = templates.save_draft(c, AUTHOR, key, channel, locale, subject=subject, body=body, variables=variables,
                                 sample=sample)
    return templates.publish(c, draft["id"], AUTHOR, f"journey: {key} {channel} {locale}",
                             request_key=f"publish-{uuid.uuid4().hex}")


def email_parts(record: dict) -> tuple[str, str]:
    """The text and HTML parts of an email the sandbox received (multipart/alternative)."""
    # Parsed from bytes, as a mail client does: an 8bit UTF-8 part read back from a str would decode
    # as raw-unicode-escape.
    msg = message_from_bytes(record["raw"].encode("utf-8"), policy=default_policy)
    assert msg.get_content_type() == "multipart/alternative", msg.get_content_type()
    text = msg.get_body(("plain",)).get_content()
    html = msg.get_body(("html",)).get_content()
    return text, html


def login(page, base_url: str, email: str) -> None:
    page.goto(f"{base_url}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)


def watch_problems(page) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    return problems
