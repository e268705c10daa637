"""Webhook endpoints page: a tenant admin (or an operator admin, for any tenant)
lists, creates (secret shown once), enables/disables, rotates the secret of and
deletes the tenant's endpoints.  Every action is audited (opsboard.deliveries.webhooks ->
opsboard.audit.operator_action); the URL passes the SSRF guard at creation."""
from __future__ import annotations

import uuid

from flask import Blueprint, render_template, request
from flask_babel import gettext as _

from .. import db
from ..deliveries import endpoint_health, webhooks
from . import forms
from .context import get_config, get_db
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")

bp.context_processor(forms.form_globals)


@bp.context_processor
def _keys():
    # The create form keeps its place on the page: each answer gives it a fresh request key.
    return {"new_request_key": lambda: str(uuid.uuid4())}

PERMISSION = "webhooks.manage"


def _page(**extra):
    scope = current_scope(PERMISSION)
    with get_db().connection() as conn:
        endpoints = webhooks.list_endpoints(conn, scope)
        tenants = [(t["id"], t["slug"]) for t in db.all_rows(conn, "tenant_list_visible", scope.params)]
        # Each endpoint's last error, failure rate and dead count, linked to its page (issue 44).
        health = endpoint_health.endpoint_summaries(conn, endpoints)
    return {"endpoints": endpoints, "tenants": tenants, "health": health, **extra}


def _partial(**extra):
    template = "webhooks/_changed.html" if request.headers.get("HX-Request") else "webhooks/index.html"
    return render_template(template, **_page(**extra))


@bp.route("/")
@requires(PERMISSION)
def index():
    return render_template("webhooks/index.html", **_page())


@bp.route("/", methods=["POST"])
@requires(PERMISSION)
def create():
    try:
        tenant_id = uuid.UUID(request.form.get("tenant_id", ""))
    except ValueError:
        raise ApiError(400, "invalid_tenant", _("Choose a tenant.")) from None
    require_for_tenant(PERMISSION, tenant_id)
    with get_db().connection() as conn:
        row = webhooks.manage_create(
            conn, tenant_id, request.form.get("url", ""), request.form.get("event_types", "*"), forms.actor(),
            allow=get_config().providers.webhook_allow, description=request.form.get("description", ""),
            reason=(request.form.get("reason") or "").strip() or None, request_key=forms.request_key())
    return _partial(created=row)


def _action(endpoint_id: str, do):
    scope = current_scope(PERMISSION)
    with get_db().connection() as conn:
        return do(conn, endpoint_id, forms.actor(), scope=scope, reason=forms.reason(),
                  request_key=forms.request_key())


@bp.route("/<endpoint_id>/enable", methods=["POST"])
@requires(PERMISSION)
def enable(endpoint_id: str):
    _action(endpoint_id, lambda conn, eid, actor, **kw: webhooks.manage_set_enabled(conn, eid, True, actor, **kw))
    return _partial()


@bp.route("/<endpoint_id>/disable", methods=["POST"])
@requires(PERMISSION)
def disable(endpoint_id: str):
    _action(endpoint_id, lambda conn, eid, actor, **kw: webhooks.manage_set_enabled(conn, eid, False, actor, **kw))
    return _partial()


@bp.route("/<endpoint_id>/rotate", methods=["POST"])
@requires(PERMISSION)
def rotate(endpoint_id: str):
    row = _action(endpoint_id, webhooks.manage_rotate)
    return _partial(created=row if row.get("secret") else None)


@bp.route("/<endpoint_id>/delete", methods=["POST"])
@requires(PERMISSION)
def delete(endpoint_id: str):
    _action(endpoint_id, webhooks.manage_delete)
    return _partial()


@bp.route("/<endpoint_id>")
@requires("jobs.view")
def endpoint(endpoint_id: str):
    """One endpoint's page: what it is, its last error, its failure rate and its dead deliveries
    (each a link to its job; a dead delivery's page links back here).  Read-only: the actions stay on
    the list, for ``webhooks.manage``; reading needs what the dead jobs themselves need (jobs.view)."""
    scope = current_scope("jobs.view")
    with get_db().connection() as conn:
        ep = webhooks.show_endpoint(conn, scope, endpoint_id)
        if ep is None:
            raise ApiError(404, "not_found", _("No such webhook endpoint, or it belongs to a tenant you cannot see."))
        health = endpoint_health.endpoint_health(conn, ep["tenant_id"], ep["id"])
        # In flight against its limit per endpoint, its share, its answer time (issue 50).
        flight = endpoint_health.endpoint_flight(conn, ep["tenant_id"], ep["id"])
    return render_template("webhooks/endpoint.html", e=ep, health=health, flight=flight)
