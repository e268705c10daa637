"""Webhooks per the Standard Webhooks specification: endpoints, signing, verification, fan-out.

Every delivery carries three headers:

* ``webhook-id``: ``msg_<event id>``, the same on every retry: the receiver's dedupe key;
* ``webhook-timestamp``: seconds since the epoch, of this attempt;
* ``webhook-signature``: ``v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>``, one per
  secret separated by spaces (several during a rotation).

Secrets are ``whsec_`` + base64 of 24 random bytes.  The body is the same bytes
on every attempt: ``{"type", "timestamp", "data"}`` serialized with sorted keys.

Receivers verify with :func:`verify` (or any Standard Webhooks library)::

    from opsboard.deliveries.webhooks import verify, WebhookVerificationError
    try:
        event = verify(["whsec_..."], request.headers, request.get_data())
    except WebhookVerificationError:
        abort(400)
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets as secrets_mod
import time
import uuid
from datetime import datetime
from typing import Iterable, Mapping

import psycopg

from .. import alerts, audit, db, jobqueue
from ..auth import TenantScope
from ..errors import OpsError
from ..schema import new_id
from . import targets

#: Accepted clock difference between sender and receiver (seconds).
TOLERANCE = 5 * 60
SECRET_PREFIX = "whsec_"
#: Seconds before each attempt of a delivery: Standard Webhooks' example schedule (at once,
#: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), jittered; a longer Retry-After wins.
WEBHOOK_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
#: After a rotation the previous secret keeps signing beside the new one this long (seconds), by default;
#: a rotation may ask for 0 to :data:`ROTATION_OVERLAP_MAX_SECONDS`.
ROTATION_OVERLAP_SECONDS = 24 * 3600
ROTATION_OVERLAP_MAX_SECONDS = 7 * 24 * 3600


class WebhookVerificationError(Exception):
    """The signature, timestamp or headers of a received webhook are not valid."""


def generate_secret() -> str:
    """A new endpoint secret: ``whsec_`` + base64 of 24 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets_mod.token_bytes(24)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret)


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` over ``id.timestamp.body``."""
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def sign(secrets: Iterable[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a delivery, signed with every secret."""
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(timestamp)),
            "webhook-signature": " ".join(signature(s, msg_id, int(timestamp), body) for s in secrets)}


def verify(secrets: str | Iterable[str], headers: Mapping[str, str], body: bytes, *,
           tolerance: int = TOLERANCE, now: float | None = None) -> dict:
    """Check a received webhook against one or more secrets; return its JSON body.

    Raises :class:`WebhookVerificationError` when a header is missing, the
    timestamp is outside ``tolerance`` or no signature matches any secret.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, ts_text, sigs = lower["webhook-id"], lower["webhook-timestamp"], lower["webhook-signature"]
        ts = int(ts_text)
    except (KeyError, ValueError):
        raise WebhookVerificationError("missing or malformed webhook headers") from None
    if abs((time.time() if now is None else now) - ts) > tolerance:
        raise WebhookVerificationError("timestamp outside the tolerance")
    given = [s.partition(",")[2] for s in sigs.split() if s.startswith("v1,")]
    for secret in ([secrets] if isinstance(secrets, str) else secrets):
        expected = signature(secret, msg_id, ts, body).partition(",")[2]
        if any(hmac.compare_digest(expected, g) for g in given):
            try:
                return json.loads(body)
            except ValueError:
                raise WebhookVerificationError("the body is not JSON") from None
    raise WebhookVerificationError("no matching signature")


def message_id(event_id) -> str:
    """The ``webhook-id`` of an event: stable across retries and redeliveries."""
    return f"msg_{uuid.UUID(str(event_id)).hex}"


def body_of(event: dict) -> bytes:
    """The delivery body: identical bytes on every attempt."""
    occurred = event["occurred_at"]
    return json.dumps({"type": event["type"], "timestamp": occurred.isoformat() if isinstance(occurred, datetime)
                       else str(occurred), "data": event["payload"]},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# ---------------------------------------------------------------- endpoints


class EndpointError(ValueError):
    code = "invalid_endpoint"


def create_endpoint(conn: psycopg.Connection, tenant, url: str, event_types: Iterable[str] = ("*",), *,
                    secret: str | None = None, description: str = "") -> dict:
    """Register an endpoint for a tenant; returns the row (with its secret, to show once)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
        raise EndpointError("the URL must be http(s)://host/...")
    secret = secret or generate_secret()
    try:
        _key(secret)
    except (ValueError, TypeError):
        raise EndpointError("the secret must be whsec_ followed by base64") from None
    types = sorted(set(event_types)) or ["*"]
    return db.one(conn, "webhook_endpoint_insert", {
        "id": new_id(), "tenant_id": jobqueue.tenant_id_of(tenant), "url": url, "secrets": [secret],
        "event_types": types, "description": description})


def rotate_secret(conn: psycopg.Connection, tenant, endpoint_id, new_secret: str | None = None,
                  keep: int = 2, overlap_seconds: float = ROTATION_OVERLAP_SECONDS,
                  now: datetime | None = None) -> dict:
    """Make a new secret current; the previous ``keep - 1`` keep signing beside it for
    ``overlap_seconds`` (the receiver's time to switch), then only the new one signs (``0``: at once)."""
    return db.one(conn, "webhook_endpoint_rotate", {
        "id": endpoint_id, "tenant_id": jobqueue.tenant_id_of(tenant), "secret": new_secret or generate_secret(),
        "keep": keep, "overlap_seconds": float(overlap_seconds), "now": now})


def get_endpoint(conn: psycopg.Connection, tenant, endpoint_id) -> dict | None:
    return db.one(conn, "webhook_endpoint_get", {"id": endpoint_id, "tenant_id": jobqueue.tenant_id_of(tenant)})


def list_endpoints(conn: psycopg.Connection, scope: TenantScope, limit: int = 200) -> list[dict]:
    """Endpoints in ``scope`` with their breaker state (dashboard); no secrets."""
    return db.all_rows(conn, "webhook_endpoint_list", {**scope.params, "limit": limit, "id": None})


def show_endpoint(conn: psycopg.Connection, scope: TenantScope, endpoint_id) -> dict | None:
    """One endpoint in ``scope`` as :func:`list_endpoints` shows it (None: not there, or not a uuid)."""
    try:
        endpoint_id = uuid.UUID(str(endpoint_id))
    except ValueError:
        return None
    return db.one(conn, "webhook_endpoint_list", {**scope.params, "limit": 1, "id": endpoint_id})


def fanout(conn: psycopg.Connection, event_id) -> list[dict]:
    """One ``webhook.deliver`` job per enabled endpoint subscribed to the event's type.

    Idempotent: the key ``<event_id>:<endpoint_id>`` makes a repeated fan-out
    return the existing jobs, a dead one included (the unique key index leaves
    dead jobs out for replays; only an audited replay re-runs a dead delivery).
    Returns the jobs (empty when the event is gone).
    """
    event = db.one(conn, "webhook_event_get", {"id": event_id})
    if event is None:
        return []
    endpoints = db.all_rows(conn, "webhook_endpoint_subscribed", {"tenant_id": event["tenant_id"],
                                                                  "type": event["type"]})
    existing = jobqueue.get_by_keys(conn, event["tenant_id"], "webhook.deliver",
                                    [f"{event_id}:{ep['id']}" for ep in endpoints])
    jobs = []
    for ep in endpoints:
        if f"{event_id}:{ep['id']}" in existing:
            jobs.append(existing[f"{event_id}:{ep['id']}"])
            continue
        jobs.append(jobqueue.enqueue(conn, "webhook.deliver", {"endpoint_id": str(ep["id"]), "event_id": str(event_id)},
                                  tenant=event["tenant_id"], idempotency_key=f"{event_id}:{ep['id']}",
                                  event_id=event_id))
    return jobs


def fanout_many(conn: psycopg.Connection, event_ids: list, correlation: dict | None = None,
                traces: dict | None = None) -> dict:
    """:func:`fanout` of many events at once: one statement finds every event's subscribed endpoints
    and the keys already held (``webhook_fanout_targets``), one inserts the missing deliveries
    (``enqueue_many``).  Returns ``{event_id: number of endpoints}`` for the events found (a gone
    event is left out).  Idempotent as :func:`fanout`; run it inside the caller's transaction.
    ``correlation`` (``{event_id: correlation id}``) gives the deliveries their event's correlation id,
    ``traces`` (``{event_id: trace context}``) its trace context (:mod:`opsboard.tracing`).
    """
    targets = db.all_rows(conn, "webhook_fanout_targets", {"event_ids": list(event_ids)})
    counts: dict = {}
    new, keys = [], set()
    correlation = correlation or {}
    traces = traces or {}
    for t in targets:
        counts[t["event_id"]] = counts.get(t["event_id"], 0) + 1
        if not t["held"] and t["key"] not in keys:
            keys.add(t["key"])
            new.append(jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(t["endpoint_id"]),
                                                           "event_id": str(t["event_id"])},
                                       t["tenant_id"], idempotency_key=t["key"], event_id=t["event_id"],
                                       correlation_id=correlation.get(t["event_id"]),
                                       trace_context=traces.get(t["event_id"])))
    if new:
        jobqueue.enqueue_many(conn, new)
    return counts


def fanout_at_relay(conn: psycopg.Connection, jobs: list[dict]) -> int:
    """``webhook.fanout`` done by the outbox relay (:func:`opsboard.outbox.run_at_relay`): the fan-out of
    the events it is relaying, in its transaction, from the job rows it would have inserted (their
    payload's ``event_id``, their correlation id and trace context).  Returns the number of deliveries the events have.

    Why at the relay: a fan-out job per event was a whole job's life (its row and index entries, a
    claim, a completion, an attempt row) for two statements of work that the relay's own transaction
    can run for its whole batch (`opsboard bench --scenario api_worker`; docs/performance.md, API).
    The deliveries commit exactly when their events are marked relayed; their keys
    (``<event_id>:<endpoint_id>``) make a later fan-out job of the same event a no-op.
    """
    ids, correlation, traces = [], {}, {}
    for job in jobs:
        event_id = uuid.UUID(str(job["payload"]["event_id"]))
        if event_id not in correlation:
            ids.append(event_id)
            correlation[event_id] = job.get("correlation_id")
            traces[event_id] = job.get("trace_context")
    return sum(fanout_many(conn, ids, correlation, traces).values())


def disable_endpoint(conn: psycopg.Connection, tenant_id, endpoint_id, reason: str, *,
                     now: datetime | None = None) -> dict | None:
    """Disable an endpoint and tell the tenant's admins and ops: an alert and an audit row.

    Returns the endpoint when this call disabled it (None when it already was).
    """
    with conn.transaction():
        row = db.one(conn, "webhook_endpoint_disable", {"id": endpoint_id, "tenant_id": tenant_id,
                                                        "reason": reason, "now": now})
        if row is None:
            return None
        summary = f"webhook endpoint disabled ({reason}): {row['url'][:120]}"
        alert = alerts.open_alert(conn, rule="webhook_endpoint_disabled", key=str(endpoint_id), tenant_id=tenant_id,
                                  severity="warning", summary=summary,
                                  details={"endpoint_id": str(endpoint_id), "reason": reason}, now=now)
        audit.record(conn, audit.SYSTEM, "webhook_endpoint.disable", target_type="webhook_endpoint",
                     target_id=endpoint_id, tenant_id=tenant_id, reason=reason,
                     after={"enabled": False, "alert_id": str(alert["id"])})
    return row


# ---------------------------------------------------------------- management (dashboard and API)

#: An event type a tenant may subscribe to: ``*`` (all) or a dotted name.
EVENT_TYPE = re.compile(r"^(\*|[a-z][a-z0-9_]*(\.[a-z0-9_]+)*)$")
MAX_EVENT_TYPES = 50


def check_event_types(types) -> list[str]:
    """The sorted, distinct event types; ``["*"]`` when none are given."""
    if isinstance(types, str):
        types = [t.strip() for t in types.replace(",", " ").split()]
    if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) for t in types):
        raise OpsError("event_types must be a list of event type names", "invalid_event_types")
    clean = sorted({t.strip() for t in types if t.strip()}) or ["*"]
    if len(clean) > MAX_EVENT_TYPES or not all(len(t) <= 100 and EVENT_TYPE.match(t) for t in clean):
        raise OpsError("event types are '*' or dotted lower-case names like order.paid (at most %(n)s)",
                       "invalid_event_types", params={"n": MAX_EVENT_TYPES})
    return clean


def check_target(url: str, allow=()) -> str:
    """The URL when the SSRF guard lets it through (at registration: also resolved), else OpsError."""
    url = url.strip() if isinstance(url, str) else ""
    if (not url.startswith(("http://", "https://")) or len(url) > 2000
            or any(c.isspace() or not c.isprintable() for c in url)):
        raise OpsError("the URL must be http(s)://host/... (at most 2000 characters, no spaces)", "invalid_url")
    try:
        targets.check_url(url, allow)
    except targets.Refused as exc:
        raise OpsError("this URL cannot receive webhooks: %(why)s", "target_refused", status=422,
                       params={"why": str(exc)}) from None
    return url


def public(row: dict) -> dict:
    """An endpoint as shown to its owner: never its secrets (those are shown once, when made)."""
    return {"id": row["id"], "tenant_id": row["tenant_id"], "url": row["url"],
            "event_types": list(row["event_types"]), "enabled": row["enabled"],
            "disabled_reason": row.get("disabled_reason"), "disabled_at": row.get("disabled_at"),
            "description": row.get("description") or "", "created_at": row.get("created_at"),
            "secret_count": len(row["secrets"]) if "secrets" in row else row.get("secret_count"),
            "previous_secrets_until": row.get("previous_secrets_until")}


def _audited(row: dict) -> dict:
    return {"url": row["url"], "event_types": list(row["event_types"]), "enabled": row["enabled"],
            "secret_count": len(row["secrets"])}


def _scoped(conn, endpoint_id, scope: TenantScope) -> dict:
    try:
        endpoint_id = uuid.UUID(str(endpoint_id))
    except ValueError:
        raise OpsError("no such webhook endpoint", "not_found") from None
    row = db.one(conn, "webhook_endpoint_get_scoped", {"id": endpoint_id, **scope.params})
    if row is None:
        raise OpsError("no such webhook endpoint", "not_found")
    return row


def manage_create(conn: psycopg.Connection, tenant_id, url: str, event_types, actor: audit.Actor, *,
                  allow=(), description: str = "", reason: str | None = None,
                  request_key: str | None = None) -> dict:
    """Register an endpoint (URL checked by the SSRF guard, resolved now), audited.

    Returns the endpoint (:func:`public`) with ``secret``: the only time it is shown.
    """
    url = check_target(url, allow)
    types = check_event_types(event_types)
    description = (description or "").strip()
    if len(description) > 200 or not all(c.isprintable() for c in description):
        raise OpsError("the description must be at most 200 printable characters", "invalid_description")
    secret = generate_secret()

    def perform(ctx: audit.ActionContext) -> dict:
        try:
            row = create_endpoint(conn, tenant_id, url, types, secret=secret, description=description)
        except psycopg.errors.ForeignKeyViolation:
            raise OpsError("no such tenant", "invalid_tenant") from None
        ctx.write(tenant_id=row["tenant_id"], after={"endpoint_id": str(row["id"]), **_audited(row)})
        return {**public(row), "secret": secret}

    def repeat(previous: dict) -> dict:
        row = get_endpoint(conn, tenant_id, (previous["after"] or {}).get("endpoint_id"))
        if row is None:
            raise OpsError("the endpoint this request made has been deleted since", "not_found")
        return public(row)

    return audit.operator_action(conn, actor, "webhook_endpoint.create", target_type="tenant",
                                 target_id=tenant_id, reason=reason or "new webhook endpoint",
                                 request_key=request_key, perform=perform, repeat=repeat)


def manage_set_enabled(conn: psycopg.Connection, endpoint_id, enabled: bool, actor: audit.Actor, *,
                       scope: TenantScope, reason: str | None, request_key: str | None = None) -> dict:
    """Enable (breaker forgotten: it starts closed) or disable an endpoint, audited."""
    action = "webhook_endpoint.enable" if enabled else "webhook_endpoint.disable"

    def perform(ctx: audit.ActionContext) -> dict:
        row = _scoped(conn, endpoint_id, scope)
        if row["enabled"] == enabled:
            raise (OpsError("the endpoint is enabled already", "invalid_status") if enabled
                   else OpsError("the endpoint is disabled already", "invalid_status"))
        if enabled:
            after = db.one(conn, "webhook_endpoint_enable", {"id": row["id"], "tenant_id": row["tenant_id"]})
            db.execute(conn, "webhook_endpoint_breaker_reset", {"id": row["id"]})
        else:
            after = db.one(conn, "webhook_endpoint_disable", {"id": row["id"], "tenant_id": row["tenant_id"],
                                                              "reason": "manual", "now": None})
        ctx.write(tenant_id=row["tenant_id"], before={"enabled": row["enabled"]}, after={"enabled": enabled})
        return public(after)

    def repeat(previous: dict) -> dict:
        return public(_scoped(conn, previous["target_id"], scope))

    return audit.operator_action(conn, actor, action, target_type="webhook_endpoint", target_id=endpoint_id,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


def manage_rotate(conn: psycopg.Connection, endpoint_id, actor: audit.Actor, *, scope: TenantScope,
                  reason: str | None, request_key: str | None = None, keep: int = 2,
                  overlap_seconds: float | None = None) -> dict:
    """A new current secret (returned once as ``secret``); the previous one keeps signing beside it
    for ``overlap_seconds`` (default :data:`ROTATION_OVERLAP_SECONDS`)."""
    secret = generate_secret()
    overlap = ROTATION_OVERLAP_SECONDS if overlap_seconds is None else overlap_seconds
    if not 0 <= overlap <= ROTATION_OVERLAP_MAX_SECONDS:
        raise OpsError("the overlap must be 0 to %(max)s seconds", "invalid_overlap", status=422,
                       params={"max": ROTATION_OVERLAP_MAX_SECONDS})

    def perform(ctx: audit.ActionContext) -> dict:
        row = _scoped(conn, endpoint_id, scope)
        after = rotate_secret(conn, row["tenant_id"], row["id"], secret, keep=keep, overlap_seconds=overlap)
        until = after["previous_secrets_until"]
        ctx.write(tenant_id=row["tenant_id"], before={"secret_count": len(row["secrets"])},
                  after={"secret_count": len(after["secrets"]),
                         "previous_secrets_until": until.isoformat() if until else None})
        return {**public(after), "secret": secret}

    def repeat(previous: dict) -> dict:
        return public(_scoped(conn, previous["target_id"], scope))

    return audit.operator_action(conn, actor, "webhook_endpoint.rotate_secret", target_type="webhook_endpoint",
                                 target_id=endpoint_id, reason=reason, request_key=request_key,
                                 perform=perform, repeat=repeat)


def manage_delete(conn: psycopg.Connection, endpoint_id, actor: audit.Actor, *, scope: TenantScope,
                  reason: str | None, request_key: str | None = None) -> dict:
    """Delete an endpoint and its breaker, audited; queued deliveries to it end ``endpoint_gone``."""
    def perform(ctx: audit.ActionContext) -> dict:
        row = _scoped(conn, endpoint_id, scope)
        db.one(conn, "webhook_endpoint_delete", {"id": row["id"], "tenant_id": row["tenant_id"]})
        ctx.write(tenant_id=row["tenant_id"], before=_audited(row))
        return {"id": row["id"], "deleted": True}

    def repeat(previous: dict) -> dict:
        return {"id": uuid.UUID(previous["target_id"]), "deleted": True}

    return audit.operator_action(conn, actor, "webhook_endpoint.delete", target_type="webhook_endpoint",
                                 target_id=endpoint_id, reason=reason, request_key=request_key,
                                 perform=perform, repeat=repeat)
