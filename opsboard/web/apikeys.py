"""API keys page: a tenant admin creates (shown once) and revokes the tenant's HTTP API keys; an operator's
admin does so for any tenant.  The secret is shown once in the answer, never logged or audited."""
from __future__ import annotations

import uuid

from flask import Blueprint, render_template, request
from flask_login import current_user
from flask_babel import gettext as _

from .. import apikeys, audit, dashboard
from .context import get_db, request_id
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("apikeys", __name__, url_prefix="/api-keys")

PERMISSION = "users.manage"


def _page(**extra):
    scope = current_scope(PERMISSION)
    with get_db().connection() as conn:
        keys = apikeys.list_keys(conn, scope)
        # Operator staff create keys for any tenant; a tenant's admin for their own tenants.
        tenants = sorted({(t["id"], t["slug"]) for t in dashboard.tenant_options(conn, scope)
                          if current_user.can(PERMISSION, t["id"])}, key=lambda t: t[1])
    return {"keys": keys, "tenants": tenants, **extra}


@bp.route("/")
@requires(PERMISSION)
def index():
    return render_template("apikeys/index.html", **_page())


@bp.route("/", methods=["POST"])
@requires(PERMISSION)
def create():
    try:
        tenant_id = uuid.UUID(request.form.get("tenant_id", ""))
    except ValueError:
        raise ApiError(400, "invalid_tenant", _("Choose a tenant.")) from None
    require_for_tenant(PERMISSION, tenant_id)
    try:
        with get_db().connection() as conn:
            secret, row = apikeys.create(conn, tenant_id, request.form.get("name", ""),
                                         audit.Actor.of(current_user, request_id()))
    except apikeys.ApiKeyError as exc:
        raise ApiError(400, exc.code, _(str(exc))) from None   # its message id: ApiKeyError's 2nd argument
    template = "apikeys/_created.html" if request.headers.get("HX-Request") else "apikeys/index.html"
    return render_template(template, **_page(created={"secret": secret, **row}))


@bp.route("/<key_id>/revoke", methods=["POST"])
@requires(PERMISSION)
def revoke(key_id: str):
    try:
        with get_db().connection() as conn:
            apikeys.revoke(conn, key_id, audit.Actor.of(current_user, request_id()), current_scope(PERMISSION),
                           reason=(request.form.get("reason") or "").strip() or None)
    except apikeys.ApiKeyError as exc:
        raise ApiError(404, exc.code, _("No such API key.")) from None
    template = "apikeys/_list.html" if request.headers.get("HX-Request") else "apikeys/index.html"
    return render_template(template, **_page())
