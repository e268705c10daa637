"""Dead letters: dead jobs grouped by (type, last error code), with links to
the matching jobs and a "replay all" that asks for confirmation first."""
from __future__ import annotations

from flask import Blueprint, make_response, render_template, request, url_for
from flask_babel import gettext as _

from .. import dashboard
from ..config import QUEUE_NAMES
from . import forms
from .context import get_config, read_connection
from .errors import ApiError
from .security import current_scope, requires

bp = Blueprint("deadletters", __name__, url_prefix="/dead")
bp.context_processor(forms.form_globals)

#: The page's query arguments: what its links and HX-Push-Url carry.
PAGE_ARGS = ("queue", "tenant_id", "show")


def _context() -> dict:
    queue_name = (request.args.get("queue") or "").strip() or None
    if queue_name is not None and queue_name not in QUEUE_NAMES:
        raise ApiError(400, "invalid_filter", _("queue must be one of %(names)s", names=", ".join(QUEUE_NAMES)))
    tenant_id = forms.arg_uuid("tenant_id")
    include_handled = request.args.get("show") == "all"
    scope = current_scope("jobs.view")
    with read_connection() as conn:
        found = dashboard.dead_letter_groups(conn, scope, queue_name=queue_name, tenant_id=tenant_id,
                                             include_handled=include_handled)
        tenants = dashboard.tenant_options(conn, scope)
    groups = found.groups
    return {"groups": groups, "window": found, "queues": QUEUE_NAMES, "tenants": tenants,
            "args": forms.link_args(PAGE_ARGS),
            "queue_name": queue_name, "tenant_id": tenant_id, "include_handled": include_handled,
            "total_open": sum(g["open"] for g in groups), "dead_retention_days": get_config().dead_retention_days}


@bp.route("/")
@requires("jobs.view")
def index():
    return render_template("deadletters/index.html", **_context())


@bp.route("/_groups")
@requires("jobs.view")
def groups():
    response = make_response(render_template("deadletters/_groups.html", **_context()))
    response.headers["HX-Push-Url"] = url_for("deadletters.index", **forms.link_args(PAGE_ARGS))
    return response
