"""Alerts: open and recently closed alerts, one alert's page, acknowledging
with a reason, and the banner every page loads for users who see alerts."""
from __future__ import annotations

from flask import Blueprint, abort, render_template
from flask_login import current_user
from flask_babel import gettext as _

from .. import alerts
from . import forms
from .context import get_db
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("alerts", __name__, url_prefix="/alerts")
bp.context_processor(forms.form_globals)


def _lists() -> dict:
    with get_db().connection() as conn:
        return alerts.list_alerts(conn, current_scope("alerts.view"))


@bp.route("/")
@requires("alerts.view")
def index():
    return render_template("alerts/index.html", **_lists())


@bp.route("/_list")
@requires("alerts.view")
def alert_list():
    return render_template("alerts/_list.html", **_lists())


@bp.route("/<uuid:alert_id>")
@requires("alerts.view")
def detail(alert_id):
    with get_db().connection() as conn:
        found = alerts.alert_detail(conn, current_scope("alerts.view"), alert_id)
    if found is None:
        abort(404, _("No such alert, or it is not yours to see."))
    return render_template("alerts/detail.html", **found)


@bp.route("/<uuid:alert_id>/ack", methods=["POST"])
@requires("alerts.ack")
def ack(alert_id):
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        alert = alerts.get_alert(conn, current_scope("alerts.view"), alert_id)
        if alert is None:
            abort(404, _("No such alert, or it is not yours to see."))
        if alert["tenant_id"] is not None:
            require_for_tenant("alerts.ack", alert["tenant_id"])
        elif not current_scope("alerts.ack").all:  # platform alerts: operator staff only
            raise ApiError(403, "forbidden", _("Only operator staff can acknowledge platform alerts."))
        row = alerts.acknowledge(conn, alert_id, forms.actor(), reason, key, scope=current_scope("alerts.ack"))
    return forms.render_result("alerts/_ack_result.html", alert=row, reason=reason)


@bp.route("/_banner")
def banner():
    """The count of open, unacknowledged alerts; empty for users without alerts.view."""
    if not current_user.is_authenticated or not current_user.has("alerts.view"):
        return ""
    with get_db().connection() as conn:
        counts = alerts.count_unacknowledged(conn, current_scope("alerts.view"))
        from .pauses import visible_holds
        holds = visible_holds(conn)   # what operators hold by hand is as loud as an alert (issue 28)
    return render_template("alerts/_banner.html", counts=counts, holds=holds)
