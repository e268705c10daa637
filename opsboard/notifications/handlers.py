"""Notification jobs: fan an event out, then deliver each channel.

``notifications.fanout {event_id}``: :func:`opsboard.notifications.fanout.fan_out`
(inbox rows, deliveries, deliver jobs; a rerun adds nothing).

``notifications.deliver {delivery_id}``: render the channel's live template
(the delivery's tenant's own version, else the platform's, else the shipped
text, each with the locale chain user -> tenant -> fa; the inbox row's text
when no layer has the channel; a template that cannot render -- a bound of the
sandbox -- fails the delivery as ``template_<code>``, e.g. ``template_too_large``), prepare it in the channel's format (:class:`opsboard.channels.Rendered`:
``html`` a whole ``<html lang dir>`` document beside the tag-free text,
``title`` a lock-screen title, generic when the delivery is marked generic,
``text`` the text cut to the channel's length), find the recipient on the
channel (its ``reach``: none -> ``suppressed``, ``unreachable``) and call its
``hand_over``, which enqueues the provider job in this transaction and returns
the reference kept in ``provider_ref`` (``delivery_hand_over``, with the
template version and locale used).  The channel entries (:mod:`opsboard.channels`)
come from the catalogue: email, SMS and push from the deliveries feature, an
extension's from its module.  The delivery stays ``queued`` until the provider
job answers; a delivery already handed over or no longer queued is left alone
(idempotent).  A critical category's messages are handed over as critical,
with :data:`policy.CRITICAL_TTL`.  The first delivery of a digest (its head) closes the digest and
sends its text when it collected more than one item (:mod:`opsboard.notifications.digest`).
"""
from __future__ import annotations

import uuid

from opsboard import channels, db, retry
from opsboard.auth import TenantScope
from opsboard.notifications import fanout as fanoutmod
from opsboard.notifications import digest as digestmod
from opsboard.notifications import policy, render, render_sandbox, templates

GENERIC_TITLE = "New notification"
#: The generic title of a sensitive notification's push, in the recipient's language (issue 43).
GENERIC_TITLES = {"en": GENERIC_TITLE, "fa": "اعلان تازه"}


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


def _mark(conn, delivery, status, *, reason=None, error_code=None, version=None, locale=None, own=None):
    return db.one(conn, "delivery_mark", {"id": delivery["id"], "status": status, "reason": reason, "ref": None,
                                          "error_code": error_code, "template_version": version,
                                          "template_own": own, "locale": locale, "now": None})


def _prepared(ch: channels.Channel, subject: str, body: str, locale: str, version, generic: bool,
              link: str | None = None, base: str = "") -> channels.Rendered:
    """The rendered text in the channel's format (``channels.FORMATS``); ``link`` is the object's
    absolute address, and an email's links to this site are made absolute on ``base`` (issue 43)."""
    if ch.format == "html":
        # Sent as multipart/alternative: the tag-free text, then the HTML in a <html lang dir>.
        title = render.email_text(subject)
        body = render.absolute_links(body, base)
        return channels.Rendered(title, _cut(render.email_text(body), ch.max_length), locale, version,
                                 html=render.email_document(title, body, locale), generic=generic, link=link)
    if ch.format == "title":
        title = GENERIC_TITLES.get(locale, GENERIC_TITLE) if generic else render.push_preview(subject, body)["title"]
        return channels.Rendered(subject, "" if generic else _cut(body, ch.max_length),
                                 locale, version, title=title, generic=generic, link=link)
    return channels.Rendered(subject if ch.subject else "", _cut(body, ch.max_length), locale, version,
                             generic=generic, link=link)


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:max(limit - 1, 0)] + "\u2026"


def deliver(job):
    delivery_id = _uuid(job.payload["delivery_id"], "delivery_id")
    with job.connection() as conn, conn.transaction():
        d = db.one(conn, "delivery_load", {"id": delivery_id, "tenant_id": job.tenant_id})
        if d is None:
            return retry.Permanent("delivery_gone")
        if d["status"] != "queued" or d["provider_ref"] is not None:
            return retry.Success(ref=d["provider_ref"])
        ch = channels.get(d["channel"])
        if ch is None or ch.hand_over is None:
            # A channel no longer registered (an extension removed), or the inbox (never a deliver job).
            _mark(conn, d, "failed", error_code="unknown_channel")
            return retry.Permanent("unknown_channel")
        event = fanoutmod.load_event(conn, d["event_id"], TenantScope(all=False, ids=(d["tenant_id"],)))
        pol = policy.policy_for(d["event_type"])
        if event is None or pol is None:
            _mark(conn, d, "failed", error_code="no_policy")
            return retry.Permanent("no_policy")
        tenant_locale = db.one(conn, "notification_tenant_locale", {"tenant_id": d["tenant_id"]})["locale"]
        chain = render.locale_chain(d["user_locale"], tenant_locale)
        variables = fanoutmod.variables_for(conn, pol, event, d["recipient_id"])
        layers = templates.layers(conn, pol.template, d["tenant_id"])
        # The first item of a digest is its flush (opsboard.notifications.digest): the digest is closed here,
        # in the transaction that hands it over, and with more than one item its text is the digest's.
        collected = digestmod.close(conn, d)
        if collected is not None and collected["taken"]:
            return retry.Success(ref=collected["provider_ref"])
        if collected is not None and collected["item_count"] > 1:
            layers = templates.layers(conn, digestmod.TEMPLATE_KEY, d["tenant_id"])
            variables = {**variables, **digestmod.variables(collected, chain)}
        try:
            out = fanoutmod.render_layers(layers, ch.template_channel, chain, variables)
        except render_sandbox.RenderUnavailable as exc:
            # Every render process busy past the deadline: not this template's fault; try again shortly.
            return retry.Retryable("render_busy", retry_after=5, detail=str(exc))
        except render.TemplateProblem as exc:
            # The chosen version (a tenant's own, most likely) cannot render this event: a bound of the
            # sandbox, a variable the event lacks.  The delivery fails with a code saying so; it is never
            # sent with another layer's words nor retried (the same text fails the same way).
            code = f"template_{exc.code}"
            found = layers.pick(ch.template_channel, chain)
            _mark(conn, d, "failed", error_code=code, locale=found[1] if found else None,
                  version=found[2].get("version") if found else None, own=bool(found and found[0] == render.OWN))
            return retry.Permanent(code, detail=str(exc)[:300])
        subject, body, version, locale, own = out if out is not None else (
            d["event_type"], "", None, chain[-1], False)
        subject = subject or d["inbox_title"] or d["event_type"]
        body = body or d["inbox_body"] or ""
        critical = policy.category(pol.category).critical
        target = ch.reach(conn, d) if ch.reach is not None else None
        if ch.reach is not None and not target:
            _mark(conn, d, "suppressed", reason="unreachable")
            return None
        base = getattr(getattr(job, "settings", None), "public_url", "") or ""
        link = render.absolute_url(base, render.object_link(
            variables, f"{event['aggregate_type']}:{event['aggregate_id']}"))
        rendered = _prepared(ch, subject, body, locale, version, bool(d["generic"]), link, base)
        # The provider job carries the request's correlation id and the event (issue 43): one request
        # is followed to the message it sent (jobs page, delivery page).
        d = {**d, "correlation_id": getattr(job, "correlation_id", None)}
        try:
            ref = ch.hand_over(conn, d, rendered, target, critical=critical, ttl=policy.CRITICAL_TTL)
        except channels.Unreachable:
            _mark(conn, d, "suppressed", reason="unreachable")
            return None
        except channels.Refused as exc:
            _mark(conn, d, "failed", error_code=exc.code, version=version, locale=locale, own=own)
            return retry.Permanent(exc.code)
        db.one(conn, "delivery_hand_over", {"id": d["id"], "ref": str(ref), "template_version": version,
                                            "template_own": own, "locale": locale, "now": None})
    return None
