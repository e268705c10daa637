"""The notification channels this feature sends: email, SMS and Web Push (:mod:`opsboard.channels`).

Each hands a notification's rendered text to this feature's provider job, in the deliver job's
transaction: ``email.send`` / ``sms.send`` (``sms.otp`` for a critical category) through an
``outbound_messages`` row with the built-in ``notice`` text, one ``push.send`` per active device
of the recipient.  The reference returned is stored as the delivery's ``provider_ref``: the
outbound message id, or ``"N device(s)"`` for push.

The delivery's later states come from the provider jobs (the ``outbound_messages`` queries and
``delivery_push_confirm``), from an email's DSN, and for SMS from the gateway's delivery report,
which ``notifications.sms_status`` asks for (:func:`sms_status`; queued by the SMS hand-over, first
run :data:`SMS_STATUS_AFTER` later).

A tenant's *webhooks* are not a notification channel: they are event webhooks (every subscribed
event of the tenant, signed, to the tenant's endpoint; ``webhook.fanout``), not a message to one
person chosen by a notification policy, preference and quiet hours.  A person's own incoming webhook
(Slack, Mattermost) would be a channel, which an extension module can add with its own job type.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from .. import channels as _channels
from .. import db, jobqueue, retry
from ..catalogue import Catalogue
from ..jobtypes import Field, define
from ..persian import marked as _l
from . import messages
from .providers import sms as sms_provider

#: First look at an SMS's fate this long after the hand-over (then the job type's backoff).
SMS_STATUS_AFTER = timedelta(seconds=30)
#: How long the receipt query waits, without spending an attempt, while its SMS's provider job has
#: not sent it yet (retrying a gateway fault, or held by an operator's pause).
SMS_NOT_SENT_SNOOZE = 60.0
#: The gateway's delivery report -> the delivery's final state.  "undeliverable": the network
#: took it and the handset's side returned it (a bounce); "expired": its validity period ran out
#: before the handset took it; "failed"/"rejected": refused.
SMS_REPORT_STATES = {"delivered": "delivered", "undeliverable": "bounced", "expired": "expired",
                     "failed": "failed", "rejected": "failed"}


def _key(delivery) -> str:
    return f"delivery:{delivery['id']}"


def _trace(delivery) -> dict:
    """The provider job's tracing: the deliver job's correlation id and the delivery's event."""
    return {"correlation_id": delivery.get("correlation_id"), "event_id": delivery.get("event_id")}


def reach_email(conn, delivery) -> str | None:
    """The recipient's email address (the user's), or None."""
    return delivery.get("email") or None


def hand_over_email(conn, delivery, rendered: _channels.Rendered, target: str, *, critical: bool, ttl: timedelta) -> str:
    """``email.send`` (multipart/alternative: the tag-free text, then the HTML document)."""
    try:
        out = messages.send_email(conn, delivery["tenant_id"], target, "notice",
                                  {"subject": rendered.subject, "text": rendered.text, "html": rendered.html},
                                  idempotency_key=_key(delivery), critical=critical,
                                  expires_in=ttl.total_seconds() if critical else None, **_trace(delivery))
    except messages.InvalidPayload as exc:
        raise _channels.Refused(getattr(exc, "code", "invalid_recipient")) from None
    return str(out["message"]["id"])


def reach_sms(conn, delivery) -> str | None:
    """The recipient's phone number (their notification profile's), or None."""
    return delivery.get("phone") or None


def hand_over_sms(conn, delivery, rendered: _channels.Rendered, target: str, *, critical: bool, ttl: timedelta) -> str:
    """``sms.send`` (``sms.otp`` when critical), then the receipt query 30 s later."""
    try:
        out = messages.send_sms(conn, delivery["tenant_id"], target, "notice", {"subject": "", "text": rendered.text},
                                idempotency_key=_key(delivery), otp=critical,
                                expires_in=ttl.total_seconds(), **_trace(delivery))
    except messages.InvalidPayload as exc:
        raise _channels.Refused(getattr(exc, "code", "invalid_recipient")) from None
    # The gateway's receipt comes later: ask for it once the SMS has had time to arrive.
    jobqueue.enqueue(conn, "notifications.sms_status", {"delivery_id": str(delivery["id"])},
                     tenant=delivery["tenant_id"], idempotency_key=f"sms_status:{delivery['id']}",
                     run_at=db.now(conn) + SMS_STATUS_AFTER, **_trace(delivery))
    return str(out["message"]["id"])


def reach_push(conn, delivery) -> list[dict] | None:
    """The recipient's active Web Push subscriptions in the delivery's tenant, or None."""
    subs = db.all_rows(conn, "user_push_subscriptions", {"tenant_id": delivery["tenant_id"],
                                                          "user_ref": str(delivery["recipient_id"])})
    return subs or None


def hand_over_push(conn, delivery, rendered: _channels.Rendered, target: list[dict], *, critical: bool, ttl: timedelta) -> str:
    """One ``push.send`` per device: the notification id, a title and the deep link to its object (the
    notification's click URL), nothing else."""
    try:
        for s in target:
            messages.send_push(conn, delivery["tenant_id"], s["id"], str(delivery["notification_id"]),
                               title=(rendered.title or "")[:80], critical=critical, url=rendered.link,
                               **_trace(delivery))
    except messages.InvalidPayload as exc:
        raise _channels.Refused(getattr(exc, "code", "invalid_recipient")) from None
    return f"{len(target)} device(s)"


def _uuid(value, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise retry.Permanent(f"invalid_{field}") from None


def sms_status(job):
    """A sent SMS delivery -> delivered / bounced / expired / failed from the gateway's delivery
    report, asked by client id (:data:`SMS_REPORT_STATES`).

    Retryable while the gateway has it on its way; snoozed (no attempt spent) while its provider
    job has not sent it yet, however long that job retries or is held, and done when that job ended
    without sending it (its end settled the delivery); a delivery in a final state is left alone
    (idempotent).
    """
    delivery_id = _uuid(job.payload["delivery_id"], "delivery_id")
    with job.connection() as conn:
        d = db.one(conn, "delivery_load", {"id": delivery_id, "tenant_id": job.tenant_id})
        if d is None:
            return retry.Permanent("delivery_gone")
        if d["channel"] != "sms" or d["status"] not in ("queued", "sent") or d["provider_ref"] is None:
            return None
        msg = db.one(conn, "outbound_message_get", {"id": _uuid(d["provider_ref"], "provider_ref"),
                                                    "tenant_id": d["tenant_id"]})
        if msg is None:
            return retry.Permanent("message_gone")
        if msg["status"] == "failed":            # sms.send ended it (outbound_message_failed moved the delivery)
            return None
        if msg["status"] != "sent" or d["status"] != "sent":
            # Not sent yet: wait for the provider job (sms.send / sms.otp, keyed by the delivery)
            # without spending attempts; when it has ended without sending, there is nothing to ask.
            if db.one(conn, "job_unfinished_by_key", {"tenant_id": d["tenant_id"], "types": ["sms.send", "sms.otp"],
                                                      "idempotency_key": f"delivery:{d['id']}"}):
                return retry.Snooze(seconds=SMS_NOT_SENT_SNOOZE, code="sms_not_sent_yet")
            return None
    try:
        found = sms_provider.lookup(job.settings, str(msg["id"]))
    except sms_provider.StatusUnavailable as exc:
        return retry.Retryable(str(exc))
    status = (found or {}).get("status")
    final = SMS_REPORT_STATES.get(status)
    if final is not None:
        with job.connection() as conn:
            _channels.record_outcome(conn, "sms", d["id"], d["tenant_id"], final,
                                     None if final == "delivered" else f"sms_{status}")
        return None
    return retry.Retryable("sms_pending" if found else "sms_not_found")


def register(cat: Catalogue) -> None:
    """The email, SMS and push notification channels, and the SMS receipt query's job type."""
    _channels.define_channel(cat, "push", label=_l("Push"), reach=reach_push, hand_over=hand_over_push,
                             format="title", subject=False, max_length=120, position=10, registered_by="deliveries", sensitive="generic",
                             states=("queued", "sent", "failed", "expired", "suppressed"),
                             sandbox="the sandbox's Web Push service (decrypts each message)")
    _channels.define_channel(cat, "sms", label=_l("SMS"), reach=reach_sms, hand_over=hand_over_sms,
                             format="text", subject=False, position=20, registered_by="deliveries", sensitive="approved",
                             states=("queued", "sent", "delivered", "failed", "bounced", "expired", "suppressed"),
                             sandbox="the sandbox's SMS gateway (and its delivery reports)")
    _channels.define_channel(cat, "email", label=_l("Email"), reach=reach_email, hand_over=hand_over_email,
                             format="html", subject=True, position=30, registered_by="deliveries", sensitive="full",
                             states=("queued", "sent", "delivered", "failed", "bounced", "expired", "suppressed"),
                             sandbox="the sandbox's SMTP server (aiosmtpd)")
    define(cat, "notifications.sms_status", handler=sms_status,
           fields={"delivery_id": Field(uuid.UUID)}, max_attempts=12, timeout=30, backoff_base=15.0,
           backoff_cap=1800.0,
           description="Ask the SMS gateway (by client id) what became of a sent SMS delivery: "
                       "delivered or failed; retried while the gateway still has it on its way.")
