"""Tenants: backlog per tenant and share of running slots, so that fairness is visible."""
from __future__ import annotations

import uuid

from flask import Blueprint, render_template
from flask_babel import gettext as _

from .. import metrics
from .context import get_db
from .errors import ApiError
from .pauses import holds_context
from .security import current_scope, requires

bp = Blueprint("tenants", __name__, url_prefix="/tenants")


def _backlog() -> dict:
    with get_db().connection() as conn:
        return {"rows": metrics.tenant_backlog(conn, current_scope("tenants.view"))}


@bp.route("/")
@requires("tenants.view")
def index():
    return render_template("tenants/index.html", **_backlog())


@bp.route("/_backlog")
@requires("tenants.view")
def backlog():
    return render_template("tenants/_backlog.html", **_backlog())


@bp.route("/<tenant_id>")
@requires("tenants.view")
def detail(tenant_id: str):
    try:
        tid = uuid.UUID(tenant_id)
    except ValueError:
        raise ApiError(404, "not_found", _("No such tenant.")) from None
    from .charts import line_chart
    from .queues import chart_range
    range_name = chart_range()
    with get_db().connection() as conn:
        found = metrics.tenant_detail(conn, current_scope("tenants.view"), tid)
        if found is None:
            raise ApiError(404, "not_found", _("No such tenant."))
        # tenant_detail checked the scope: the tenant's own attempts only.
        chart = metrics.tenant_chart(conn, tid, range_name)
        failures = metrics.tenant_recent_failures(conn, tid)
        holds = holds_context(conn)
    return render_template("tenants/detail.html", **found, **holds, chart=chart, failures=failures, line_chart=line_chart,
                           range_name=range_name, ranges=list(metrics.CHART_RANGES),
                           bucket_minutes=metrics.CHART_RANGES[range_name][1],
                           p95_cap=float(metrics.DURATION_BUCKETS_MS[-1]))
