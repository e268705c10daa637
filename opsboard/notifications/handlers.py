"""Notification jobs: fan an event out, then deliver each channel.

``notifications.fanout {event_id}``: :func:`opsboard.notifications.fanout.fan_out`
(inbox rows, deliveries, deliver jobs; a rerun adds nothing).

``notifications.deliver {delivery_id}``: render the channel's live template
(locale chain user -> tenant -> fa) and hand it to the provider job in one
transaction -- ``email.send`` / ``sms.send`` (``sms.otp`` for critical
categories) through an ``outbound_messages`` row with the built-in
``notice`` template carrying the rendered text, or one ``push.send`` per
active device (generic title when the delivery is marked generic).  The
delivery stays ``queued``, handed over (``delivery_hand_over``: the outbound
message id or the device count, the template version and locale used); a
delivery already handed over or no longer queued is left alone (idempotent).
A critical category's SMS and email expire with :data:`policy.CRITICAL_TTL`.

The provider jobs move it on (see docs/deliveries.md, "Delivery states"):
accepted -> ``sent``; refused for good or out of retries -> ``failed``; its
time to live passed before it ran -> ``expired`` (the expiry service); a Web
Push subscription gone (404/410) -> ``expired``.  After ``sent``:
``notifications.sms_status {delivery_id}`` (queued by the deliver job, first
run 30 s later) asks the SMS gateway by client id for its delivery report
(``delivered``, ``bounced``, ``expired`` or ``failed``; retried while the SMS
is on its way); an email's DSN (``POST /api/providers/email/dsn``) makes it
``delivered`` or ``bounced``.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from opsboard import db, jobqueue, retry
from opsboard.auth import TenantScope
from opsboard.deliveries import messages
from opsboard.notifications import fanout as fanoutmod
from opsboard.notifications import policy, render, templates
from opsboard.deliveries.providers import sms as sms_provider

GENERIC_TITLE = "New notification"
#: First look at an SMS's fate this long after the deliver job (then the job type's backoff).
SMS_STATUS_AFTER = timedelta(seconds=30)
#: How long the receipt query waits, without spending an attempt, while its SMS's provider job has
#: not sent it yet (retrying a gateway fault, or held by an operator's pause).
SMS_NOT_SENT_SNOOZE = 60.0
#: The gateway's delivery report -> the delivery's final state.  "undeliverable": the network
#: took it and the handset's side returned it (a bounce); "expired": its validity period ran out
#: before the handset took it; "failed"/"rejected": refused.
SMS_REPORT_STATES = {"delivered": "delivered", "undeliverable": "bounced", "expired": "expired",
                     "failed": "failed", "rejected": "failed"}


def _uuid(value, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise retry.Permanent(f"invalid_{field}") from None


def fanout(job):
    event_id = _uuid(job.payload["event_id"], "event_id")
    after = _uuid(job.payload["after"], "after") if job.payload.get("after") else None
    with job.connection() as conn:
        fanoutmod.fan_out(conn, event_id, after=after, lane=fanoutmod.lane_of(job.group_key))
    return None


def _mark(conn, delivery, status, *, reason=None, error_code=None, version=None, locale=None):
    return db.one(conn, "delivery_mark", {"id": delivery["id"], "status": status, "reason": reason, "ref": None,
                                          "error_code": error_code, "template_version": version,
                                          "locale": locale, "now": None})


def deliver(job):
    delivery_id = _uuid(job.payload["delivery_id"], "delivery_id")
    with job.connection() as conn, conn.transaction():
        d = db.one(conn, "delivery_load", {"id": delivery_id, "tenant_id": job.tenant_id})
        if d is None:
            return retry.Permanent("delivery_gone")
        if d["status"] != "queued" or d["provider_ref"] is not None:
            return retry.Success(ref=d["provider_ref"])
        event = fanoutmod.load_event(conn, d["event_id"], TenantScope(all=False, ids=(d["tenant_id"],)))
        pol = policy.policy_for(d["event_type"])
        if event is None or pol is None:
            _mark(conn, d, "failed", error_code="no_policy")
            return retry.Permanent("no_policy")
        tenant_locale = db.one(conn, "notification_tenant_locale", {"tenant_id": d["tenant_id"]})["locale"]
        chain = render.locale_chain(d["user_locale"], tenant_locale)
        variables = fanoutmod.variables_for(conn, pol, event, d["recipient_id"])
        subject, body, version, locale = fanoutmod.render_for(templates.live(conn, pol.template), d["channel"],
                                                              chain, variables, d["event_type"])
        subject = subject or d["inbox_title"] or d["event_type"]
        body = body or d["inbox_body"] or ""
        critical = policy.category(pol.category).critical
        key = f"delivery:{d['id']}"
        try:
            if d["channel"] == "email":
                # email.send sends multipart/alternative: the text part is the tag-free body, the
                # HTML part the rendered (autoescaped, RTL-wrapped for fa) body in a <html lang dir>.
                title = render.email_text(subject)
                out = messages.send_email(conn, d["tenant_id"], d["email"], "notice",
                                           {"subject": title, "text": render.email_text(body),
                                            "html": render.email_document(title, body, locale)},
                                           idempotency_key=key, critical=critical,
                                           expires_in=policy.CRITICAL_TTL.total_seconds() if critical else None)
                ref = str(out["message"]["id"])
            elif d["channel"] == "sms":
                out = messages.send_sms(conn, d["tenant_id"], d["phone"] or "", "notice",
                                         {"subject": "", "text": body}, idempotency_key=key, otp=critical,
                                         expires_in=policy.CRITICAL_TTL.total_seconds())
                ref = str(out["message"]["id"])
                # The gateway's receipt comes later: ask for it once the SMS has had time to arrive.
                jobqueue.enqueue(conn, "notifications.sms_status", {"delivery_id": str(d["id"])}, tenant=d["tenant_id"],
                              idempotency_key=f"sms_status:{d['id']}",
                              run_at=db.now(conn) + SMS_STATUS_AFTER, event_id=d["event_id"])
            elif d["channel"] == "push":
                title = GENERIC_TITLE if d["generic"] else render.push_preview(subject, body)["title"]
                subs = db.all_rows(conn, "user_push_subscriptions", {"tenant_id": d["tenant_id"],
                                                                      "user_ref": str(d["recipient_id"])})
                if not subs:
                    _mark(conn, d, "suppressed", reason="unreachable")
                    return None
                for s in subs:
                    messages.send_push(conn, d["tenant_id"], s["id"], str(d["notification_id"]), title=title[:80],
                                       critical=critical)
                ref = f"{len(subs)} device(s)"
            else:
                return retry.Permanent("invalid_channel")
        except messages.InvalidPayload as exc:
            _mark(conn, d, "failed", error_code=exc.code if hasattr(exc, "code") else "invalid_recipient",
                  version=version, locale=locale)
            return retry.Permanent("invalid_recipient")
        db.one(conn, "delivery_hand_over", {"id": d["id"], "ref": ref, "template_version": version,
                                            "locale": locale, "now": None})
    return None


def _confirm(conn, d, status, error_code=None):
    return db.one(conn, "delivery_confirm", {"id": d["id"], "tenant_id": d["tenant_id"], "status": status,
                                             "error_code": error_code, "now": None})


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
            _confirm(conn, d, final, None if final == "delivered" else f"sms_{status}")
        return None
    return retry.Retryable("sms_pending" if found else "sms_not_found")
