"""Notification jobs: fan an event out, then deliver each channel.

``notifications.fanout {event_id}``: :func:`opsboard.notifications.fanout.fan_out`
(inbox rows, deliveries, deliver jobs; a rerun adds nothing).

``notifications.deliver {delivery_id}``: render the channel's live template
(locale chain user -> tenant -> fa) and hand it to the provider job in one
transaction -- ``email.send`` / ``sms.send`` (``sms.otp`` for critical
categories) through an ``outbound_messages`` row with the built-in
``notice`` template carrying the rendered text, or one ``push.send`` per
active device (generic title when the delivery is marked generic).  The
delivery becomes ``sent`` with the template version and locale used; a
delivery that is no longer queued is left alone (idempotent).
"""
from __future__ import annotations

import uuid

from opsboard import db, providers, retry
from opsboard.auth import TenantScope
from opsboard.notifications import fanout as fanoutmod
from opsboard.notifications import policy, render, templates

GENERIC_TITLE = "New notification"


def _uuid(value, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise retry.Permanent(f"invalid_{field}") from None


def fanout(job):
    event_id = _uuid(job.payload["event_id"], "event_id")
    with job.connection() as conn:
        fanoutmod.fan_out(conn, event_id)
    return None


def _mark(conn, delivery, status, *, reason=None, ref=None, error_code=None, version=None, locale=None):
    return db.one(conn, "delivery_mark", {"id": delivery["id"], "status": status, "reason": reason, "ref": ref,
                                          "error_code": error_code, "template_version": version,
                                          "locale": locale, "now": None})


def deliver(job):
    delivery_id = _uuid(job.payload["delivery_id"], "delivery_id")
    with job.connection() as conn, conn.transaction():
        d = db.one(conn, "delivery_load", {"id": delivery_id, "tenant_id": job.tenant_id})
        if d is None:
            return retry.Permanent("delivery_gone")
        if d["status"] != "queued":
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
        critical = policy.CATEGORIES[pol.category].critical
        key = f"delivery:{d['id']}"
        try:
            if d["channel"] == "email":
                # email.send sends multipart/alternative: the text part is the tag-free body, the
                # HTML part the rendered (autoescaped, RTL-wrapped for fa) body in a <html lang dir>.
                title = render.email_text(subject)
                out = providers.send_email(conn, d["tenant_id"], d["email"], "notice",
                                           {"subject": title, "text": render.email_text(body),
                                            "html": render.email_document(title, body, locale)},
                                           idempotency_key=key)
                ref = str(out["message"]["id"])
            elif d["channel"] == "sms":
                out = providers.send_sms(conn, d["tenant_id"], d["phone"] or "", "notice",
                                         {"subject": "", "text": body}, idempotency_key=key, otp=critical,
                                         expires_in=policy.CRITICAL_TTL.total_seconds())
                ref = str(out["message"]["id"])
            elif d["channel"] == "push":
                title = GENERIC_TITLE if d["generic"] else render.push_preview(subject, body)["title"]
                subs = db.all_rows(conn, "user_push_subscriptions", {"tenant_id": d["tenant_id"],
                                                                      "user_ref": str(d["recipient_id"])})
                if not subs:
                    _mark(conn, d, "suppressed", reason="unreachable")
                    return None
                for s in subs:
                    providers.send_push(conn, d["tenant_id"], s["id"], str(d["notification_id"]), title=title[:80])
                ref = f"{len(subs)} device(s)"
            else:
                return retry.Permanent("invalid_channel")
        except providers.InvalidPayload as exc:
            _mark(conn, d, "failed", error_code=exc.code if hasattr(exc, "code") else "invalid_recipient",
                  version=version, locale=locale)
            return retry.Permanent("invalid_recipient")
        _mark(conn, d, "sent", ref=ref, version=version, locale=locale)
    return None
