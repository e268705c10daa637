"""Tenants: backlog per tenant and share of running slots, so that fairness is visible."""
from __future__ import annotations

import uuid

from flask import Blueprint, redirect, render_template, request, url_for
from flask_babel import gettext as _
from flask_login import current_user

from .. import audit, backpressure, metrics, pauses
from ..notifications import preferences
from .context import get_db
from .errors import ApiError
from .forms import actor, reason, request_key
from .pauses import holds_context, whole_number
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("tenants", __name__, url_prefix="/tenants")


def _cursor() -> tuple[int, uuid.UUID] | None:
    """The keyset cursor ``after=<waiting jobs>.<tenant id>`` (the last row of the previous page)."""
    raw = (request.args.get("after") or "").strip()
    if not raw:
        return None
    waiting, _sep, tid = raw.partition(".")
    try:
        if not waiting.isascii() or not waiting.isdigit():
            raise ValueError(waiting)
        return int(waiting), uuid.UUID(tid)
    except ValueError:
        raise ApiError(400, "invalid_filter", _("That page of tenants does not exist; start from the first page.")) from None


def _backlog() -> dict:
    after = _cursor()
    with get_db().connection() as conn:
        # One keyset page in backlog order (tenant_depth, migration 0049): the
        # whole list took seconds at 10,000 tenants.
        page = metrics.tenant_backlog_page(conn, current_scope("tenants.view"), after=after)
    return {"rows": page.rows, "total": page.total, "after": after,
            "next_after": f"{page.next_after[0]}.{page.next_after[1]}" if page.next_after else None,
            "this_page": f"{after[0]}.{after[1]}" if after else None}


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
        notification_locale = preferences.tenant_locale(conn, tid)
    return render_template("tenants/detail.html", **found, **holds, chart=chart,
                           notification_locale=notification_locale,
                           can_set_locale=current_user.is_authenticated and current_user.can("users.manage", tid),
                           can_limit=current_scope("jobs.pause").allows(tid),
                           default_rate=backpressure.DEFAULT_TENANT_RATE, default_burst=backpressure.DEFAULT_TENANT_BURST, failures=failures, line_chart=line_chart,
                           range_name=range_name, ranges=list(metrics.CHART_RANGES),
                           bucket_minutes=metrics.CHART_RANGES[range_name][1],
                           p95_cap=float(metrics.DURATION_BUCKETS_MS[-1]))


def _rate() -> float | None:
    raw = (request.form.get("rate") or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not raw.isascii() or not 0 < value <= pauses.TENANT_RATE_MAX:  # NaN and inf fail here too
        raise ApiError(400, "invalid_limit", _("A rate is a number of jobs per second above 0 and at most "
                                               "%(high)s; leave it empty for the default.", high=int(pauses.TENANT_RATE_MAX)))
    return value


@bp.route("/<tenant_id>/notification-language", methods=["POST"])
@requires("tenants.view")
def set_notification_locale(tenant_id: str):
    """The tenant's default notification language (issue 43): the language of its people who chose none.
    Its admins (``users.manage`` in this tenant; operator admins for any); audited
    ``tenant.notification_locale`` with the old value; an unknown language is a 400 ``bad_locale``."""
    try:
        tid = uuid.UUID(tenant_id)
    except ValueError:
        raise ApiError(404, "not_found", _("No such tenant.")) from None
    require_for_tenant("users.manage", tid)
    locale = request.form.get("default_locale", "")
    if locale not in preferences.NOTIFICATION_LOCALES:
        raise ApiError(400, "bad_locale", _("Unknown language."))
    with get_db().connection() as conn:
        if metrics.tenant_detail(conn, current_scope("tenants.view"), tid) is None:
            raise ApiError(404, "not_found", _("No such tenant."))
        with conn.transaction():
            before = preferences.tenant_locale(conn, tid)
            preferences.set_tenant_locale(conn, tid, locale)
            audit.record(conn, actor(), "tenant.notification_locale", target_type="tenant", target_id=tid,
                         tenant_id=tid, before={"default_locale": before}, after={"default_locale": locale})
    return redirect(url_for("tenants.detail", tenant_id=tid) + "#tenant-notification-language", code=303)


@bp.route("/<tenant_id>/limits", methods=["POST"])
@requires("jobs.pause")
def set_limits(tenant_id: str):
    """Change a tenant's enqueue rate, burst and concurrency live (issue 28): operator staff for
    any tenant, a tenant's own ops staff for theirs; audited with the old values."""
    try:
        tid = uuid.UUID(tenant_id)
    except ValueError:
        raise ApiError(404, "not_found", _("No such tenant.")) from None
    require_for_tenant("jobs.pause", tid)
    rate, burst = _rate(), whole_number("burst", pauses.TENANT_BURST_MAX)
    max_running = whole_number("max_running", pauses.TENANT_RUNNING_MAX)
    with get_db().connection() as conn:
        found = metrics.tenant_detail(conn, current_scope("jobs.pause"), tid)
        if found is None:
            raise ApiError(404, "not_found", _("No such tenant."))
        pauses.set_tenant_limits(conn, actor(), found["tenant"]["slug"], reason(), rate=rate, burst=burst,
                                 max_running=max_running, request_key=request_key())
    return redirect(url_for("tenants.detail", tenant_id=tid), code=303)
