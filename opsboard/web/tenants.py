"""Tenants: backlog per tenant and share of running slots, so that fairness is visible."""
from __future__ import annotations

import uuid

from flask import Blueprint, render_template

from .. import metrics
from ..auth import TenantScope
from .app import get_db
from .errors import ApiError
from .security import current_scope, requires

bp = Blueprint("tenants", __name__, url_prefix="/tenants")


@bp.route("/")
@requires("tenants.view")
def index():
    with get_db().connection() as conn:
        rows = metrics.tenant_backlog(conn, current_scope("tenants.view"))
    return render_template("tenants/index.html", rows=rows)


@bp.route("/_backlog")
@requires("tenants.view")
def backlog():
    with get_db().connection() as conn:
        rows = metrics.tenant_backlog(conn, current_scope("tenants.view"))
    return render_template("tenants/_backlog.html", rows=rows)


@bp.route("/<tenant_id>")
@requires("tenants.view")
def detail(tenant_id: str):
    try:
        tid = uuid.UUID(tenant_id)
    except ValueError:
        raise ApiError(404, "not_found", "No such tenant.") from None
    scope = current_scope("tenants.view")
    if not scope.allows(tid):
        raise ApiError(404, "not_found", "No such tenant.")
    with get_db().connection() as conn:
        rows = metrics.tenant_backlog(conn, scope, tenant_id=tid)
        from .. import db
        parts = db.all_rows(conn, "metrics_depth_by_tenant_queue_type", {**scope.params, "tenant_id": tid})
        tenant = db.one(conn, "tenant_get_visible", {**scope.params, "id": tid})
    if tenant is None:
        raise ApiError(404, "not_found", "No such tenant.")
    return render_template("tenants/detail.html", tenant=tenant, summary=rows[0] if rows else None, parts=parts)
