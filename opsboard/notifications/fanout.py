"""Event -> inbox rows, deliveries and channel jobs, for every recipient, in one transaction.

Called by the ``notifications.fanout`` job (one per event, via the outbox
subscriber ``notify``).  For one event:

1. the policy names the recipients; their facts (roles, membership, profile,
   quiet hours, devices) and the category's preferences load in two queries;
2. :func:`opsboard.notifications.policy.check` decides each channel, in order;
3. the inbox rows are written first (under a transaction lock, so the cursor
   is commit-ordered), then one delivery per recipient x event x channel --
   both ``ON CONFLICT DO NOTHING``: a second relay of the event adds nothing
   and queues nothing;
4. each new queued (or quiet-hours deferred: ``run_at`` = window end)
   delivery gets a ``notifications.deliver`` job, inserted in one statement;
5. one NOTIFY per new inbox row's recipient (one ``*`` past 200) wakes SSE.

Rendering for the inbox happens here (the row stores its text); channel
texts are rendered by the deliver job from the same live templates.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime

import psycopg

from .. import auth, db, outbox, queue
from ..auth import TenantScope
from ..queue import ALL_TENANTS
from ..schema import Role, new_id
from . import policy as policymod
from . import preferences, render, templates
from .inbox import CHANNEL

BROADCAST_OVER = 200


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


def _has_permission(roles, permission: str | None) -> bool:
    if not roles:
        return False
    if permission is None:
        return True
    granted = set()
    for r in roles:
        try:
            granted |= auth.ROLE_PERMISSIONS.get(Role(r), frozenset())
        except ValueError:
            continue
    return permission in granted


def variables_for(conn, pol, event: dict, user_id) -> dict:
    """The template variables of one recipient (the policy's function, else the payload)."""
    base = dict(event["payload"])
    base.setdefault("event_type", event["type"])
    if pol.variables is not None:
        base.update(pol.variables(conn, event, user_id) or {})
    return base


def render_for(live: dict, channel: str, chain: list[str], variables: dict,
               event_type: str) -> tuple[str, str, int | None, str]:
    """(title, body, template version or None, locale) of one channel; a built-in text without a template."""
    locale = render.pick_locale({loc for (ch, loc) in live if ch == channel}, chain)
    if locale is None:
        return event_type, "", None, chain[-1]
    tpl = live[(channel, locale)]
    try:
        subject, body = render.render(channel, locale, tpl["subject"], tpl["body"], variables)
    except render.TemplateProblem:
        # Cannot happen for a checked template with the declared variables; never lose the row for it.
        return event_type, "", None, locale
    return subject, body, tpl["version"], locale


def load_event(conn, event_id, scope: TenantScope = ALL_TENANTS) -> dict | None:
    return db.one(conn, "outbox_event_get", {"id": event_id, **scope.params})


def fan_out(conn: psycopg.Connection, event_id, now: datetime | None = None) -> dict:
    """Fan one stored event out; returns counts ``{recipients, inbox, deliveries, jobs, suppressed}``."""
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
    with conn.transaction():
        at = db.now(conn, now)
        user_ids = list(dict.fromkeys(u for u in map(_uuid, pol.recipients(conn, event) or ()) if u))
        counts["recipients"] = len(user_ids)
        if not user_ids:
            return counts
        tenant_id = event["tenant_id"]
        facts = {r["user_id"]: r for r in db.all_rows(conn, "notification_recipient_facts",
                                                      {"tenant_id": tenant_id, "user_ids": user_ids})}
        defaults, own = {}, {}
        for p in db.all_rows(conn, "notification_preferences_for", {"tenant_id": tenant_id, "category": pol.category,
                                                                   "user_ids": user_ids}):
            (own.setdefault(p["user_id"], {}) if p["user_id"] else defaults)[p["channel"]] = p["enabled"]
        live = templates.live(conn, pol.template)
        tenant_locale = db.one(conn, "notification_tenant_locale", {"tenant_id": tenant_id})["locale"]
        cache: dict = {}
        inbox_rows, plans = [], []
        s_tenant, s_event = str(tenant_id), str(event["id"])  # str(uuid) is slow: 30,000 calls per 10,000 users
        for uid in user_ids:
            f = facts.get(uid)
            quiet = None
            if f is not None and f["quiet_start"] is not None:
                quiet = preferences.quiet_until(at, f["quiet_time_zone"], f["quiet_start"], f["quiet_end"],
                                                f["quiet_days"])
            rf = policymod.RecipientFacts(
                has_permission=f is not None and f["is_active"] and _has_permission(f["roles"], pol.permission),
                membership_active=f is not None and f["membership_active"],
                preferences=preferences.resolve(defaults, own.get(uid, {})),
                quiet_until=quiet,
                reachable={"inbox": True, "email": bool(f and f["email"]), "sms": bool(f and f["phone"]),
                           "push": bool(f and f["devices"])})
            decisions = {ch: policymod.check(pol, ch, rf) for ch in pol.channels}
            chain = render.locale_chain(f["locale"] if f else None, tenant_locale)
            inbox_id = None
            if decisions["inbox"].status != "suppressed":
                if pol.variables is None:
                    key = tuple(chain)
                    if key not in cache:
                        cache[key] = render_for(live, "inbox", chain, variables_for(conn, pol, event, uid),
                                                event["type"])
                    title, body, version, locale = cache[key]
                else:
                    title, body, version, locale = render_for(live, "inbox", chain,
                                                              variables_for(conn, pol, event, uid), event["type"])
                inbox_id = new_id()
                inbox_rows.append({"id": str(inbox_id), "tenant_id": s_tenant, "recipient_id": str(uid),
                                   "event_id": s_event, "event_type": event["type"],
                                   "category": pol.category, "template_key": pol.template,
                                   "template_version": version, "locale": locale, "title": title, "body": body,
                                   "data": {"aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}"}})
            plans.append((uid, inbox_id, decisions, chain))

        db.one(conn, "notification_insert_lock")
        inserted = db.all_rows(conn, "notification_insert_many", {"rows": json.dumps(inbox_rows), "now": now})
        counts["inbox"] = len(inserted)
        # A second relay: the rows exist already; point the deliveries at them.
        if len(inserted) == len(inbox_rows):
            existing = {r["recipient_id"]: r["id"] for r in inserted}
        else:  # a second relay: the rows exist already; point the deliveries at them
            existing = {r["recipient_id"]: r["id"] for r in db.all_rows(conn, "notification_ids_for_event",
                                                                         {"event_id": event["id"]})}
        critical = policymod.CATEGORIES[pol.category].critical
        job_type = "notifications.deliver_critical" if critical else "notifications.deliver"
        delivery_rows = []
        for uid, _, decisions, chain in plans:
            nid = existing.get(uid)
            s_uid, s_nid = str(uid), (str(nid) if nid else None)
            for ch, d in decisions.items():
                status = "delivered" if ch == "inbox" and d.status != "suppressed" else (
                    "suppressed" if d.status == "suppressed" else "queued")
                did = str(new_id())
                delivery_rows.append({
                    "id": did, "tenant_id": s_tenant, "recipient_id": s_uid,
                    "event_id": s_event, "event_type": event["type"],
                    "notification_id": s_nid, "channel": ch, "status": status,
                    "suppression_reason": d.reason if d.status == "suppressed" else None,
                    "deferred_until": d.available_at.isoformat() if d.available_at else None,
                    "generic": d.generic, "template_key": pol.template, "template_version": None,
                    # The deliver job's id is the delivery's id: no second write to link them.
                    "job_id": did if status == "queued" else None,
                    "locale": chain[0]})
        new = db.all_rows(conn, "delivery_insert_many", {"rows": json.dumps(delivery_rows), "now": now})
        counts["deliveries"] = len(new)
        counts["suppressed"] = sum(1 for r in new if r["status"] == "suppressed")
        jobs = []
        for r in new:
            if r["status"] != "queued":
                continue
            row = queue._prepare(queue.NewJob(
                job_type, {"delivery_id": str(r["id"])}, tenant_id, idempotency_key=f"delivery:{r['id']}",
                run_at=r["deferred_until"], correlation_id=event.get("correlation_id"), event_id=event["id"],
                expires_at=(event["occurred_at"] + policymod.CRITICAL_TTL) if critical else None))
            row["id"] = r["id"]
            jobs.append(row)
        if jobs:
            # Like the outbox relay: one statement; a delivery row is new exactly once, so is its job.
            db.execute(conn, "job_insert_many", {"rows": "[" + ",".join(queue._row_json(j) for j in jobs) + "]"})
        counts["jobs"] = len(jobs)
        recipients = sorted({str(r["recipient_id"]) for r in inserted})
        if len(recipients) > BROADCAST_OVER:
            recipients = ["*"]
        if recipients:
            db.execute(conn, "inbox_notify", {"channel": CHANNEL, "keys": recipients})
    return counts
