"""/api/v1/webhooks: the key's tenant manages its webhook endpoints (the
dashboard's Webhooks page over the API).  Every change is audited
(opsboard.deliveries.webhooks -> opsboard.audit.operator_action) with the API key as the
actor; ``Idempotency-Key`` makes a change safe to repeat; a signing secret is
in the answer once, when it is made (create, rotate-secret)."""
from __future__ import annotations

from datetime import datetime

from flask import jsonify, request

from ... import audit
from ...deliveries import webhooks
from ...auth import TenantScope
from ...errors import OpsError
from ..context import get_config, get_db, request_id
from .blueprint import bp
from .common import _KEY_RE, Problem, authenticate, field, idempotent, json_object, only_fields


def endpoint_json(row: dict) -> dict:
    out = {}
    for name, value in webhooks.public(row).items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif name in ("id", "tenant_id"):
            value = str(value)
        out[name] = value
    if row.get("secret"):
        out["secret"] = row["secret"]
    return out


def _actor(key: dict) -> audit.Actor:
    return audit.Actor(label=f"api key {key['id']}", request_id=request_id())


def _request_key(key: dict) -> str | None:
    idem = request.headers.get("Idempotency-Key")
    if idem is None:
        return None
    if not _KEY_RE.match(idem):
        raise Problem(400, "invalid_idempotency_key", "Idempotency-Key must be 1 to 200 printable ASCII characters.",
                      "Idempotency-Key")
    return f"api:{key['id']}:{idem}"


def _reason(body: dict, default: str) -> str:
    return (field(body, "reason", str, required=False, max_length=500) or "").strip() or default


def _body_or_empty() -> dict:
    """An optional JSON body (only ``reason``) for the action endpoints."""
    if not request.get_data():
        return {}
    body = json_object()
    only_fields(body, {"reason"})
    return body


def _call(fn):
    with get_db().connection() as conn:
        return _call_on(conn, fn)


def _call_on(conn, fn):
    try:
        return fn(conn)
    except OpsError as exc:
        field_name = {"invalid_url": "url", "target_refused": "url", "invalid_event_types": "event_types",
                      "invalid_overlap": "overlap_seconds"}.get(
            exc.code)
        raise Problem(exc.status, exc.code, str(exc), field_name) from None


def _scope(key: dict) -> TenantScope:
    return TenantScope(all=False, ids=(key["tenant_id"],))


@bp.route("/webhooks", methods=["GET"])
def list_webhooks():
    key = authenticate()
    rows = _call(lambda conn: webhooks.list_endpoints(conn, _scope(key)))
    return jsonify({"endpoints": [endpoint_json(r) for r in rows]})


@bp.route("/webhooks", methods=["POST"])
def create_webhook():
    key = authenticate()
    body = json_object()
    only_fields(body, {"url", "event_types", "description", "reason"})
    url = field(body, "url", str, max_length=2000)
    types = body.get("event_types", ["*"])
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise Problem(400, "invalid_field", "event_types must be an array of strings.", "event_types")
    # The dashboard's text box reads nothing as every event; over the API an empty list or name is a
    # mistake, not a subscription to everything (issue 26).
    if not types or not all(webhooks.EVENT_TYPE.fullmatch(t) and len(t) <= 100 for t in types):
        raise Problem(400, "invalid_event_types", "event_types are '*' or dotted lower-case names like order.paid "
                      "(none empty; leave the field out for every event).", "event_types")
    description = field(body, "description", str, required=False, max_length=200) or ""
    reason = _reason(body, "new webhook endpoint (API)")
    request_key = _request_key(key)

    def work(conn):
        row = _call_on(conn, lambda c: webhooks.manage_create(
            c, key["tenant_id"], url, types, _actor(key), allow=get_config().providers.webhook_allow,
            description=description, reason=reason, request_key=request_key))
        return 201, endpoint_json(row)

    def still_there(conn, answer: dict) -> bool:
        return webhooks.show_endpoint(conn, _scope(key), answer["id"]) is not None

    # The same key with another body is a 409, not the first endpoint (issue 25); a replay after the
    # endpoint was deleted is a 409 idempotency_key_resource_gone, not a 201 for a gone endpoint (issue 26).
    return idempotent(key["tenant_id"], body, work, not_replayed=("secret",), still_there=still_there)


def _one(key, endpoint_id):
    row = _call(lambda conn: webhooks.show_endpoint(conn, _scope(key), endpoint_id))
    if row is None:
        raise Problem(404, "not_found", "No such webhook endpoint for this tenant.")
    return row


@bp.route("/webhooks/<endpoint_id>", methods=["GET"])
def get_webhook(endpoint_id: str):
    key = authenticate()
    return jsonify(endpoint_json(_one(key, endpoint_id)))


@bp.route("/webhooks/<endpoint_id>", methods=["DELETE"])
def delete_webhook(endpoint_id: str):
    key = authenticate()
    reason = _reason(_body_or_empty(), "deleted (API)")
    request_key = _request_key(key)
    done = _call(lambda conn: webhooks.manage_delete(conn, endpoint_id, _actor(key), scope=_scope(key),
                                                      reason=reason, request_key=request_key))
    return jsonify({"id": str(done["id"]), "deleted": True})


def _action(endpoint_id: str, default_reason: str, do):
    key = authenticate()
    reason = _reason(_body_or_empty(), default_reason)
    request_key = _request_key(key)
    row = _call(lambda conn: do(conn, endpoint_id, _actor(key), scope=_scope(key), reason=reason,
                                request_key=request_key))
    return jsonify(endpoint_json(row))


@bp.route("/webhooks/<endpoint_id>/enable", methods=["POST"])
def enable_webhook(endpoint_id: str):
    return _action(endpoint_id, "enabled (API)",
                   lambda conn, eid, actor, **kw: webhooks.manage_set_enabled(conn, eid, True, actor, **kw))


@bp.route("/webhooks/<endpoint_id>/disable", methods=["POST"])
def disable_webhook(endpoint_id: str):
    return _action(endpoint_id, "disabled (API)",
                   lambda conn, eid, actor, **kw: webhooks.manage_set_enabled(conn, eid, False, actor, **kw))


@bp.route("/webhooks/<endpoint_id>/rotate-secret", methods=["POST"])
def rotate_webhook_secret(endpoint_id: str):
    key = authenticate()
    body = {}
    if request.get_data():
        body = json_object()
        only_fields(body, {"reason", "overlap_seconds"})
    reason = _reason(body, "secret rotated (API)")
    overlap = field(body, "overlap_seconds", int, required=False)
    request_key = _request_key(key)
    row = _call(lambda conn: webhooks.manage_rotate(conn, endpoint_id, _actor(key), scope=_scope(key),
                                                     reason=reason, request_key=request_key,
                                                     overlap_seconds=overlap))
    return jsonify(endpoint_json(row))
