"""The customer ticket API under /api/v1/tickets, with the end user's bearer token (``obu_...``).

A customer opens tickets (JSON, or multipart with ``files``), lists and reads their own
(never an internal note: the public queries exclude them), replies and reopens.  Errors are
``{"error": code, "message": ...}``; a refused transition adds ``"allowed"``.

The token is the one user token of the notifications inbox API (:func:`opsboard.notifications.
inbox.create_token`, ``opsboard user-token --email E [--tenant T]``).  It names a user, not a
tenant: the tenant is the one of the user's active membership(s) (a customer gets ``member`` in
the tenant from ``user-token --tenant``); a user with none is refused ``no_tenant`` (403), with
several tenants ``tenant_ambiguous`` (403).
"""
from __future__ import annotations

import hashlib
import re
import uuid

from flask import g, jsonify, request

from ... import storage, tenancy
from ...auth import TenantScope
from ...errors import OpsError
from ...notifications import inbox
from ...tickets import portal, service
from ..context import get_config, get_db, request_id
from ..security import scope_to, takes_attachments
from .blueprint import bp
from .common import Problem, idempotent

_KEY_RE = re.compile(r"^[\x21-\x7e]{1,200}$")


def _customer() -> dict:
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip().startswith("obu_"):
        raise Problem(401, "unauthorized", "Send a user token: Authorization: Bearer obu_...",
                      headers={"WWW-Authenticate": 'Bearer realm="opsboard tickets"'})
    with tenancy.bypass(tenancy.Bypass.AUTHENTICATION), get_db().connection() as conn:
        found = inbox.verify_token(conn, secret.strip())
        if found is None:
            raise Problem(401, "unauthorized", "The token is unknown or revoked.",
                          headers={"WWW-Authenticate": 'Bearer realm="opsboard tickets", error="invalid_token"'})
        try:
            tenant = service.customer_tenant(conn, found["user_id"])
        except OpsError as exc:
            raise Problem(exc.status, exc.code, str(exc)) from None
    who = {"user_id": found["user_id"], "email": found["email"], "tenant_id": tenant["tenant_id"],
           "tenant_slug": tenant["tenant_slug"]}
    g.ticket_user = who
    scope_to([who["tenant_id"]])  # the database lets this request see the customer's tenant only
    return who


def _caller(who: dict) -> service.Caller:
    return service.Caller(who["user_id"], who["email"], None, request_id())


def _scope(who: dict) -> TenantScope:
    return TenantScope(all=False, ids=(who["tenant_id"],))


def _request_key(who: dict) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _KEY_RE.match(key):
        raise Problem(400, "invalid_idempotency_key", "Idempotency-Key must be 1 to 200 printable ASCII characters.")
    return f"{who['user_id']}:{key}"


def _refused(exc: OpsError):
    body = {"error": exc.code, "message": str(exc)}
    if getattr(exc, "allowed", None) is not None:
        body["allowed"] = exc.allowed
    resp = jsonify(body)
    resp.status_code = exc.status
    return resp


def _body() -> tuple[dict, list]:
    """JSON object, or multipart form fields plus ``files``."""
    # The app caps bodies at 1 MiB; a ticket may carry attachments up to the configured size.
    request.max_content_length = get_config().ticket_attachment_max_bytes * 4 + 64 * 1024
    if request.mimetype == "multipart/form-data":
        uploads = [service.Upload(f.filename or "attachment", f.read()) for f in request.files.getlist("files")
                   if f is not None]
        # A part whose name werkzeug cannot read comes back under None: not a field of ours.
        return {k: v for k, v in request.form.items() if isinstance(k, str)}, uploads
    if not request.is_json:
        raise Problem(400, "invalid_json", "Send JSON (application/json) or multipart/form-data.", "body")
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Problem(400, "invalid_json", "The body must be a JSON object.", "body")
    return body, []


def _limits():
    config = get_config()
    return storage.from_config(config), (config.ticket_attachment_max_bytes, config.ticket_attachment_types)


def _public(t: dict) -> dict:
    return {"id": str(t["id"]), "number": t["number"], "subject": t["subject"], "status": t["status"],
            "priority": t["priority"], "category": t.get("category_slug"),
            "created_at": t["created_at"].isoformat(), "updated_at": t["updated_at"].isoformat()}


def _detail(conn, who, ticket_id) -> dict:
    t = portal.own_ticket(conn, who["tenant_id"], who["user_id"], ticket_id)   # the web pages' rule too
    if t is None:
        raise Problem(404, "not_found", "No such ticket.")
    messages, attachments = service.public_timeline(conn, who["tenant_id"], who["user_id"], t["id"])
    return {**_public(t), "resolution_code": t["resolution_code"], "resolution_summary": t["resolution_summary"],
            "decision": t["decision"],
            "messages": [{"id": str(m["id"]), "kind": m["kind"], "author": m["author_label"], "body": m["body"],
                          "created_at": m["created_at"].isoformat()} for m in messages],
            "attachments": [{"id": str(a["id"]), "message_id": str(a["message_id"]), "filename": a["filename"],
                             "content_type": a["content_type"], "size": a["size_bytes"], "sha256": a["sha256"]}
                            for a in attachments]}


def _text_field(body: dict, name: str, required: bool = True):
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise Problem(400, "missing_field" if value is None else "invalid_field", f"{name} must be a string.", name)
    return value


@bp.route("/tickets", methods=["POST"])
@takes_attachments
def ticket_create():
    who = _customer()
    body, uploads = _body()
    store, limits = _limits()
    request_key = _request_key(who)

    def work(conn):
        t = service.create_ticket(conn, _caller(who), tenant_id=who["tenant_id"],
                                  subject=_text_field(body, "subject"), body=_text_field(body, "body"),
                                  priority=body.get("priority") or "normal",
                                  category=_text_field(body, "category", required=False),
                                  uploads=uploads, store=store, limits=limits, request_key=request_key,
                                  round_robin=get_config().ticket_round_robin)
        return 201, _detail(conn, who, t["id"])

    # What identifies the request: its fields and each upload's name and digest.  Keys are the user's own.
    identity = {"fields": body, "uploads": [[u.filename, hashlib.sha256(u.data).hexdigest()] for u in uploads]}
    try:
        return idempotent(who["tenant_id"], identity, work, namespace=f"user:{who['user_id']}:")
    except OpsError as exc:
        return _refused(exc)


@bp.route("/tickets", methods=["GET"])
def ticket_list():
    who = _customer()
    after = request.args.get("after")
    try:
        after_id = uuid.UUID(after) if after else None
        limit = min(max(int(request.args.get("limit", 50)), 1), 200)
    except ValueError:
        raise Problem(400, "invalid_filter", "after must be a ticket id and limit a number.") from None
    with get_db().connection() as conn:
        rows = portal.own_tickets(conn, who["tenant_id"], who["user_id"], after_id=after_id, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return jsonify({"tickets": [_public(r) for r in rows], "next_after": str(rows[-1]["id"]) if more else None})


@bp.route("/tickets/<ticket_id>", methods=["GET"])
def ticket_detail(ticket_id):
    who = _customer()
    with get_db().connection() as conn:
        return jsonify(_detail(conn, who, ticket_id))


def _act(ticket_id, action: str, fields: dict, uploads=()):
    who = _customer()
    store, limits = _limits()
    try:
        with get_db().connection() as conn:
            service.act(conn, ticket_id, action, _caller(who), scope=_scope(who), fields=fields,
                        request_key=_request_key(who), uploads=uploads, store=store, limits=limits)
            return jsonify(_detail(conn, who, ticket_id))
    except OpsError as exc:
        if exc.code == "not_found":
            raise Problem(404, "not_found", "No such ticket.") from None
        return _refused(exc)


@bp.route("/tickets/<ticket_id>/replies", methods=["POST"])
@takes_attachments
def ticket_reply(ticket_id):
    """A reply creates a message: Idempotency-Key through the shared helper, like ``POST /tickets``
    (same body -> the first answer, replayed; another body -> 409)."""
    who = _customer()
    body, uploads = _body()
    store, limits = _limits()

    def work(conn):
        service.act(conn, ticket_id, "reply", _caller(who), scope=_scope(who), fields={"body": body.get("body")},
                    request_key=_request_key(who), uploads=uploads, store=store, limits=limits)
        return 201, _detail(conn, who, ticket_id)

    identity = {"fields": body, "uploads": [[u.filename, hashlib.sha256(u.data).hexdigest()] for u in uploads]}
    try:
        return idempotent(who["tenant_id"], identity, work, namespace=f"user:{who['user_id']}:")
    except OpsError as exc:
        if exc.code == "not_found":
            raise Problem(404, "not_found", "No such ticket.") from None
        return _refused(exc)


@bp.route("/tickets/<ticket_id>/reopen", methods=["POST"])
def ticket_reopen(ticket_id):
    return _act(ticket_id, "reopen", {})


@bp.route("/tickets/<ticket_id>/attachments/<attachment_id>", methods=["GET"])
def ticket_attachment(ticket_id, attachment_id):
    from ..tickets import download

    who = _customer()
    with get_db().connection() as conn:
        detail = _detail(conn, who, ticket_id)
        _, attachments = service.public_timeline(conn, who["tenant_id"], who["user_id"], uuid.UUID(detail["id"]))
    found = next((a for a in attachments if str(a["id"]) == attachment_id), None)
    if found is None:
        raise Problem(404, "not_found", "No such attachment.")
    return download(found)
