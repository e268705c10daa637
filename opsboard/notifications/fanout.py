"""Event -> inbox rows, deliveries and channel jobs, for every recipient, in one transaction.

Called by the ``notifications.fanout`` job (one per event, via the outbox
subscriber ``notify``).  For one event:

1. the policy names the recipients (a callable: user ids);
2. the inbox texts are rendered once per locale key (or per recipient when
   the policy has its own ``variables``);
3. under the page lock (``notification_fanout_page_lock``: one fan-out of an
   event's page at a time) the recipients are taken in chunks of :data:`CHUNK`;
   for each chunk one statement (``notification_fanout_chunk``) leaves out the
   recipients who have a delivery of the event already (a second relay adds
   nothing and queues nothing), evaluates the policy rules in SQL over the rest
   -- permission, membership, preference, reachability, sensitivity, quiet hours
   (``opsboard_quiet_until``), the same order as
   :func:`opsboard.notifications.policy.check` -- and writes one delivery per
   recipient x event x channel and a ``notifications.deliver`` job per new
   queued delivery (``run_at`` = the quiet window's end when deferred) -- or, for a
   channel collected into a digest (policy.digest_kind), opens the recipient's digest
   (its first item, queued at the digest's flush time) or counts the delivery in the
   open one (``digested``, no job: :mod:`.digest`) -- the
   inbox channel's delivery is the inbox row itself, a deliveries row only when
   suppressed (``notification_deliveries`` shows both); then,
   last, the inbox rows (``notification_inbox_insert``) under a transaction
   lock taken just before them, so the cursor is commit-ordered while the lock
   is held for that insert and the commit only;
4. one NOTIFY per new inbox row's recipient (one ``*`` past 200) wakes SSE.

Rendering for the inbox happens here (the row stores its text); channel
texts are rendered by the deliver job from the same live templates.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime

import psycopg

from .. import auth, channels, db, jobqueue, outbox
from ..auth import TenantScope
from ..jobqueue import ALL_TENANTS
from ..schema import new_id_array
from . import policy as policymod
from . import render, render_sandbox, templates
from .inbox import CHANNEL

BROADCAST_OVER = 200
#: Recipients per set-based statement: bounds the statement's memory and the arrays sent.
CHUNK = 5000


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def granting_roles(permission: str | None) -> list[str] | None:
    """The roles that hold ``permission`` (None: any role will do)."""
    if permission is None:
        return None
    return sorted(r.value for r, perms in auth.ROLE_PERMISSIONS.items() if permission in perms)


def variables_for(conn, pol, event: dict, user_id) -> dict:
    """The template variables of one recipient (the policy's function, else the payload)."""
    base = dict(event["payload"])
    base.setdefault("event_type", event["type"])
    if pol.variables is not None:
        base.update(pol.variables(conn, event, user_id) or {})
    return base


def render_layers(layers: render.Layers, channel: str, chain: list[str], variables: dict):
    """``(title, body, version, locale, own)`` of one channel from the first layer that has it (the
    tenant's own version, the platform's, the shipped text: :class:`render.Layers`), or None when no
    layer has one.  Raises :class:`render.TemplateProblem` when the chosen template cannot render
    (a bound of the sandbox, a variable the event lacks)."""
    found = layers.pick(channel, chain)
    if found is None:
        return None
    source, locale, tpl = found
    if layers.is_shipped_text(channel, locale, tpl):
        # The product's own words: rendered here, with the sandbox's bounds only (the broadcast's hot path).
        subject, body = render.render(channel, locale, tpl["subject"], tpl["body"], variables)
    else:
        # An author's text (a tenant's or the platform's): in a render process with a deadline and a memory
        # limit, like a preview; a published version's result is cached per variables (render_sandbox).
        subject, body = render_sandbox.render_for_sending(tpl["id"], channel, locale, tpl["subject"], tpl["body"],
                                                          variables)
    return subject, body, tpl.get("version"), locale, source == render.OWN


def render_for(layers: render.Layers, channel: str, chain: list[str], variables: dict,
               event_type: str) -> tuple[str, str, int | None, str, bool]:
    """(title, body, template version or None, locale, own) of one channel; a built-in text without a
    template, or when the template cannot render (the inbox row is never lost for it)."""
    try:
        out = render_layers(layers, channel, chain, variables)
    except render.TemplateProblem:
        found = layers.pick(channel, chain)
        return event_type, "", None, found[1] if found else chain[-1], False
    if out is None:
        return event_type, "", None, chain[-1], False
    return out


def load_event(conn, event_id, scope: TenantScope = ALL_TENANTS) -> dict | None:
    return db.one(conn, "outbox_event_get", {"id": event_id, **scope.params})


def _inbox_texts(conn, pol, event: dict, live: render.Layers, tenant_locale: str, user_ids: list) -> dict:
    """``{key: {title, body, version, locale}}`` of the inbox row, as the chunk statement looks it up.

    Without per-user variables the text depends only on the locale chain: key
    ``''`` (no own locale, or one without a template) and each live inbox
    locale.  With them, one text per recipient, keyed by user id.
    """
    aggregate = f"{event['aggregate_type']}:{event['aggregate_id']}"

    def text(chain, uid):
        variables = variables_for(conn, pol, event, uid)
        title, body, version, locale, own = render_for(live, "inbox", chain, variables, event["type"])
        # link: the page of what it is about (the inbox's "Open" link; the row's data.link, issue 43)
        return {"title": title, "body": body, "version": version, "locale": locale, "own": own,
                "link": render.object_link(variables, aggregate)}

    if pol.variables is None:
        texts = {"": text(render.locale_chain(None, tenant_locale), None)}
        for loc in inbox_locales(live):
            texts[loc] = text(render.locale_chain(loc, tenant_locale), None)
        return texts
    return {str(r["user_id"]): text(render.locale_chain(r["locale"], tenant_locale), r["user_id"])
            for r in db.all_rows(conn, "notification_recipient_locales", {"user_ids": user_ids})}


def inbox_locales(live: render.Layers) -> list[str]:
    return sorted(live.locales("inbox"))


def lane_group(event_id, lane: int) -> str:
    """The job group of a broadcast's lane: at most one page job of a group runs at a time."""
    return f"fanout:{event_id}:{lane}"


def lane_of(group_key: str | None) -> int:
    """The lane of a page job from its group key (the relay's first page has none: lane 0)."""
    try:
        return int(group_key.rsplit(":", 1)[1]) if group_key and group_key.startswith("fanout:") else 0
    except (IndexError, ValueError):
        return 0


def _enqueue_page(conn, event: dict, cat, after: str, lane: int | None = None) -> None:
    jobqueue.enqueue(conn, "notifications.fanout", {"event_id": str(event["id"]), "after": after},
                     tenant=event["tenant_id"], idempotency_key=f"fanout:{event['id']}:{after}",
                     group_key=None if lane is None else lane_group(event["id"], lane),
                     queue="critical" if cat.critical else None, correlation_id=event.get("correlation_id"),
                     event_id=event["id"])


def fan_out(conn: psycopg.Connection, event_id, now: datetime | None = None, *, after=None, lane: int = 0) -> dict:
    """Fan one stored event out; returns counts ``{recipients, inbox, deliveries, jobs, suppressed}``.

    A broadcast (a policy with an ``audience``) fans out one page of the audience's ``page_size`` recipients
    after the user id ``after``; when the page is full, the next page's ``notifications.fanout`` job is
    enqueued (``next_after`` in the counts, only then) and a retry of this page finds it there already
    (its idempotency key).  With one lane it is enqueued in the page's transaction: one page at a time.
    With ``lanes`` N > 1 (the default, 2: :func:`opsboard.notifications.policy.tenant_members`) it is
    committed before the page writes, in the job group of lane ``(lane + 1) % N`` (``lane`` comes from this
    page's own group key, :func:`lane_of`), so that N pages are written at once.  Another tenant's
    occasional second of waiting in earlier two-lane runs was the default queue's claim reading every held
    deliver job (a plan made without statistics on ``jobs``), which one lane met as well
    (docs/performance.md, "Broadcast, part 5").
    """
    event = load_event(conn, event_id)
    counts = {"recipients": 0, "inbox": 0, "deliveries": 0, "jobs": 0, "suppressed": 0}
    if event is None:
        return counts
    pol = policymod.policy_for(event["type"])
    if pol is None:
        return counts
    if event["version"] != pol.version:
        event = {**event, "payload": outbox.upcast(event["type"], event["version"], event["payload"], pol.version),
                 "version": pol.version}
    cat = policymod.category(pol.category)
    lanes = pol.audience.lanes if pol.audience is not None else 1
    if pol.audience is not None:
        user_ids = list(pol.audience.page(conn, event, after, pol.audience.page_size))
        if len(user_ids) == pol.audience.page_size:
            counts["next_after"] = str(user_ids[-1])
            if lanes > 1:
                # Lanes: the next page's job commits before this page's writes, in the next lane's job
                # group, so that another slot takes it now; a lane runs one page at a time.
                with conn.transaction():
                    _enqueue_page(conn, event, cat, counts["next_after"], (lane + 1) % lanes)
    with conn.transaction():
        if pol.audience is None:
            user_ids = list(dict.fromkeys(u for u in map(_uuid, pol.recipients(conn, event) or ()) if u))
        counts["recipients"] = len(user_ids)
        if not user_ids:
            return counts
        tenant_id = event["tenant_id"]
        live = templates.layers(conn, pol.template, tenant_id)
        tenant_locale = db.one(conn, "notification_tenant_locale", {"tenant_id": tenant_id})["locale"]
        job_type = "notifications.deliver_critical" if cat.critical else "notifications.deliver"
        # A second fan-out of this page (another relay of the event, a retry beside a slow first try)
        # waits here for the first to commit; then the chunk statement's probes see its rows.
        db.one(conn, "notification_fanout_page_lock", {"event_id": event["id"], "page": str(after or "")})
        # The job policy (queue, priority, attempts) resolved and validated once for all deliver jobs.
        job = jobqueue.prepare_row(jobqueue.NewJob(
            job_type, {"delivery_id": str(event["id"])}, tenant_id,
            correlation_id=event.get("correlation_id"), event_id=event["id"],
            expires_at=(event["occurred_at"] + policymod.CRITICAL_TTL) if cat.critical else None))
        # Sensitive content: the channels that refuse it here, and those that show a generic title.
        refused, generic = channels.sensitive_rules(pol.channels, sensitive=pol.sensitivity == "sensitive",
                                                    approved=cat.sms_approved)
        params = {
            "tenant_id": tenant_id, "event_id": event["id"], "event_type": event["type"],
            "category": pol.category, "template_key": pol.template, "tenant_locale": tenant_locale,
            "data": json.dumps({"aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}"}),
            "granting_roles": granting_roles(pol.permission), "critical": cat.critical,
            "sensitivity_refused": refused, "generic_channels": generic,
            "channels": list(pol.channels), "per_user": pol.variables is not None,
            "text_locales": inbox_locales(live), "job_type": job["type"], "job_version": job["version"],
            "job_queue": job["queue"], "job_priority": job["priority"], "job_max_attempts": job["max_attempts"],
            "job_expires_at": job["expires_at"], "correlation_id": job["correlation_id"],
            "notify_limit": BROADCAST_OVER + 1, "now": now}
        # Digests: the policy's window or schedule and the event's key (the quiet hours' collecting is the
        # statement's own): policy.digest_kind is the rule.
        params.update(policymod.digest_params(pol, event))
        if pol.variables is None:
            params["texts"] = json.dumps(_inbox_texts(conn, pol, event, live, tenant_locale, user_ids))
        # Deliveries and jobs first, chunk by chunk, without the inbox lock; then the lock and the
        # inbox rows, so that the lock (seq order = commit order) is held for the inserts and the
        # commit only (1.6 s of every 5,000-member page was under it before: migration 0039).
        pending: list[tuple[dict, str]] = []
        for start in range(0, len(user_ids), CHUNK):
            chunk = user_ids[start:start + CHUNK]
            if pol.variables is not None:
                params["texts"] = json.dumps(_inbox_texts(conn, pol, event, live, tenant_locale, chunk))
            # Array literals: much cheaper to send than lists psycopg dumps element by element.
            params.update(user_ids="{" + ",".join(map(str, chunk)) + "}", inbox_ids=new_id_array(len(chunk)),
                          delivery_ids=new_id_array(len(chunk) * len(pol.channels)))
            r = db.one(conn, "notification_fanout_chunk", params)
            for k in ("deliveries", "jobs", "suppressed"):
                counts[k] += r[k]
            if r["digested"]:
                counts["digested"] = counts.get("digested", 0) + r["digested"]
            if r["inbox_users"] != "{}":
                pending.append(({"inbox_users": r["inbox_users"], "inbox_ids": r["inbox_ids"],
                                 "inbox_keys": r["inbox_keys"]}, params["texts"]))
        if counts.get("next_after") and lanes == 1:
            # The next page's job commits with this page (before the inbox lock is taken): one page of a
            # broadcast at a time, so the inbox's insert lock is never queued for by a row of page jobs that
            # other tenants' fan-outs would wait behind (pages enqueued ahead ran 16 at a time: another
            # tenant waited 114 s at p99 during a 600,000-member broadcast, `opsboard bench --scenario
            # broadcast`).
            _enqueue_page(conn, event, cat, counts["next_after"])
        recipients: list[str] = []
        if pending:
            db.one(conn, "notification_insert_lock")
            for rows, texts in pending:
                r = db.one(conn, "notification_inbox_insert", {**params, **rows, "texts": texts})
                counts["inbox"] += r["inbox"]
                counts["deliveries"] += r["inbox"]   # an inbox row is its inbox delivery (migration 0056)
                recipients += r["recipients"]
        if counts["inbox"] > BROADCAST_OVER:
            recipients = ["*"]
        if recipients:
            db.execute(conn, "inbox_notify", {"channel": CHANNEL, "keys": sorted(recipients)})
    return counts
