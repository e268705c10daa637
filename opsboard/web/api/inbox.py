"""The end user's inbox API, with the user's own bearer token (``obu_...``, not a tenant API key).

``GET /inbox`` (newest first, ``cursor`` = before; or ``since`` = after, oldest first),
``GET /inbox/unread``, ``GET /inbox/{id}`` (full text), ``POST /inbox/{id}/{seen|read|archived}``,
``GET /inbox/stream`` (SSE, see :mod:`opsboard.web.sse`), ``POST /devices`` and
``DELETE /devices/{id}`` (Web Push subscriptions), ``GET`` / ``PATCH /profile`` (the language of the
user's notifications: ``fa``, ``en`` or null, issue 43).
"""
from __future__ import annotations

import uuid

from flask import g, jsonify, request

from ... import audit, tenancy
from ...errors import OpsError
from ...notifications import devices, inbox, preferences
from .. import sse
from ..context import get_config, get_db, request_id
from ..security import scope_to
from .blueprint import bp
from .common import Problem, field, idempotent, json_object, only_fields


def authenticate_user() -> dict:
    """The caller's user token (``user_id``, ``email``), or 401."""
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Problem(401, "unauthorized", "Send your token: Authorization: Bearer obu_...",
                      headers={"WWW-Authenticate": 'Bearer realm="opsboard-inbox"'})
    with tenancy.bypass(tenancy.Bypass.AUTHENTICATION), get_db().connection() as conn:
        tok = inbox.verify_token(conn, secret.strip())
        tenant_ids = [r["tenant_id"] for r in conn.execute(
            "SELECT tenant_id FROM memberships WHERE user_id = %s AND active", (tok["user_id"],))] if tok else []
    if tok is None:
        raise Problem(401, "unauthorized", "The token is unknown or revoked.",
                      headers={"WWW-Authenticate": 'Bearer realm="opsboard-inbox", error="invalid_token"'})
    if not tok["active_member"]:
        # The same refusal as the ticket API's (no_tenant): a deactivated member reads nothing.
        raise Problem(403, "no_membership", "The token's user has no active membership of a tenant.")
    g.inbox_user = tok
    scope_to(tenant_ids)  # the database lets this request see the token's user's tenants only
    return tok


def _int_arg(name: str) -> int | None:
    raw = request.args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise Problem(400, "invalid_cursor", f"{name} must be an inbox cursor (an integer).", name) from None
    if not 0 <= value <= inbox.MAX_CURSOR:
        raise Problem(400, "invalid_cursor", f"{name} must be between 0 and {inbox.MAX_CURSOR}.", name)
    return value


def _id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise Problem(404, "not_found", "No such notification.") from None


def item_json(row: dict, full: bool = True) -> dict:
    out = {"id": str(row["id"]), "cursor": row["seq"], "event_type": row["event_type"], "category": row["category"],
           "title": row["title"], "locale": row["locale"], "created_at": row["created_at"].isoformat(),
           "seen_at": row["seen_at"].isoformat() if row["seen_at"] else None,
           "read_at": row["read_at"].isoformat() if row["read_at"] else None,
           "archived_at": row["archived_at"].isoformat() if row["archived_at"] else None}
    if full:
        out["body"] = row["body"]
        out["data"] = row["data"]
    if "deliveries" in row:   # one notification's detail: each channel's delivery state
        out["deliveries"] = row["deliveries"]
    return out


def _core(fn):
    try:
        return fn()
    except OpsError as exc:
        raise Problem(exc.status, exc.code, str(exc)) from None


@bp.route("/inbox")
def inbox_list():
    user = authenticate_user()
    before, since = _int_arg("cursor"), _int_arg("since")
    limit = _int_arg("limit") or 50
    if before is not None and since is not None:
        raise Problem(400, "invalid_cursor", "Use cursor (older) or since (newer), not both.", "since")
    with get_db().connection() as conn:
        page = inbox.page(conn, user["user_id"], before=before, since=since, limit=limit,
                          include_archived=request.args.get("archived") == "1")
        unread = inbox.unread_count(conn, user["user_id"])
    return jsonify({"items": [item_json(r) for r in page["items"]], "next_cursor": page["next_cursor"],
                    "unread": unread})


@bp.route("/inbox/unread")
def inbox_unread():
    user = authenticate_user()
    with get_db().connection() as conn:
        return jsonify({"unread": inbox.unread_count(conn, user["user_id"])})


@bp.route("/inbox/stream")
def inbox_stream():
    moved = sse.redirect_response()
    if moved is not None:
        return moved
    user = authenticate_user()
    try:
        return sse.stream_response(user["user_id"])
    except sse.StreamsFull:
        raise Problem(503, "streams_full", "This server holds as many streams as it may; poll GET /inbox?since= "
                      "and retry later.", headers={"Retry-After": str(sse.RETRY_AFTER)}) from None
    except sse.TooManyStreams:
        raise Problem(429, "too_many_streams", "Too many open streams for this user; close one.",
                      headers={"Retry-After": "5"}) from None
    except ValueError as exc:
        raise Problem(400, "invalid_cursor", str(exc), "Last-Event-ID") from None


@bp.route("/inbox/<notification_id>")
def inbox_detail(notification_id):
    user = authenticate_user()
    with get_db().connection() as conn:
        row = _core(lambda: inbox.get(conn, user["user_id"], _id(notification_id)))
    return jsonify(item_json(row))


@bp.route("/inbox/<notification_id>/<state>", methods=["POST"])
def inbox_mark(notification_id, state):
    user = authenticate_user()
    if state not in inbox.STATES:
        raise Problem(404, "not_found", f"Mark as one of {', '.join(inbox.STATES)}.")
    with get_db().connection() as conn:
        row = _core(lambda: inbox.mark(conn, user["user_id"], _id(notification_id), state))
        unread = inbox.unread_count(conn, user["user_id"])
    return jsonify({"id": str(row["id"]), "seen": row["seen_at"] is not None, "read": row["read_at"] is not None,
                    "archived": row["archived_at"] is not None, "unread": unread})


def _profile(conn, user_id) -> dict:
    tenant_id = _core(lambda: devices.home_tenant(conn, user_id))
    return preferences.notification_locale(conn, user_id, tenant_id)


@bp.route("/profile")
def profile_get():
    """The language the user's notifications are written in: their own choice (``locale``, null when
    none) and the one in force (``effective_locale``: theirs, else their tenant's default, else fa)."""
    user = authenticate_user()
    with get_db().connection() as conn:
        return jsonify(_profile(conn, user["user_id"]))


@bp.route("/profile", methods=["PATCH"])
def profile_update():
    """Set ``locale`` (``fa``, ``en``, or null to follow the tenant's default); audited
    ``user.notification_locale``.  Anything else is a 400 naming the field, nothing saved."""
    user = authenticate_user()
    body = json_object()
    only_fields(body, {"locale"})
    if "locale" not in body:
        raise Problem(400, "missing_field", "locale is required (fa, en, or null).", "locale")
    locale = field(body, "locale", str, required=False, max_length=10)
    if locale is not None and locale not in preferences.NOTIFICATION_LOCALES:
        raise Problem(400, "invalid_locale", "locale must be one of fa, en (or null).", "locale")
    with get_db().connection() as conn:
        tenant_id = _core(lambda: devices.home_tenant(conn, user["user_id"]))
        with conn.transaction():
            before = preferences.notification_locale(conn, user["user_id"], tenant_id)["locale"]
            preferences.set_locale(conn, user["user_id"], locale)
            audit.record(conn, audit.Actor(user["email"], user["user_id"], request_id()), "user.notification_locale",
                         target_type="user", target_id=user["user_id"], tenant_id=tenant_id,
                         before={"locale": before}, after={"locale": locale})
        return jsonify(preferences.notification_locale(conn, user["user_id"], tenant_id))


@bp.route("/devices", methods=["POST"])
def device_register():
    user = authenticate_user()
    body = json_object()
    # The shape of a PushSubscription, checked here (the core reads endpoint and keys, nothing else);
    # refused with the core's own code for a subscription it cannot use.
    try:
        field(body, "endpoint", str, max_length=2000)
        keys = field(body, "keys", dict)
        for name in ("p256dh", "auth"):
            field(keys, name, str, max_length=200, where=f"keys.{name}")
    except Problem as exc:
        raise Problem(400, "invalid_subscription", exc.message, exc.field) from None
    with get_db().connection() as conn:
        tenant_id = _core(lambda: devices.home_tenant(conn, user["user_id"]))

    def work(conn):
        row = _core(lambda: devices.register_for_user(conn, user["user_id"], body,
                                                      allow=get_config().providers.webhook_allow))
        return 201, {"id": str(row["id"]), "state": row["state"]}

    # Idempotency-Key through the shared helper (issue 26); a replay after the device was
    # unregistered is 409 idempotency_key_resource_gone.
    return idempotent(tenant_id, body, work, namespace=f"user:{user['user_id']}:",
                      still_there=lambda conn, answer: devices.is_active(conn, user["user_id"], answer["id"]))


@bp.route("/devices/<subscription_id>", methods=["DELETE"])
def device_unregister(subscription_id):
    user = authenticate_user()
    with get_db().connection() as conn:
        row = _core(lambda: devices.unregister(conn, user["user_id"], _id(subscription_id)))
    return jsonify({"id": str(row["id"]), "state": row["state"]})
