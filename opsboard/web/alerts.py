"""Alerts: open and recently closed alerts, one alert's page, acknowledging
with a reason, and the banner every page loads for users who see alerts."""
from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, abort, render_template
from flask_login import current_user
from babel.dates import format_timedelta
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from markupsafe import Markup

from .. import alerts
from . import forms
from .context import get_db
from .i18n import digits, num, prefs
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("alerts", __name__, url_prefix="/alerts")

#: An alert's summary by rule, from its details (opsboard.alerts stores the summary in English: the core
#: knows no reader).  Codes and queue names stay left-to-right islands.
_SUMMARIES = {
    "dead_rising": (_l("%(n)s jobs went dead in the last %(window)s (threshold %(threshold)s)"),
                    ("dead", "window_seconds", "threshold")),
    "error_code": (_l("%(n)s jobs failing with %(code)s in the last %(window)s"),
                   ("jobs", "window_seconds", "error_code")),
    "queue_age": (_l("the oldest ready job in %(queue)s has waited %(age)s (target %(target)s)"),
                  ("queue", "oldest_age_seconds", "target_seconds")),
    "no_worker": (_l("no live worker serves %(queue)s, which has ready jobs"), ("queue",)),
}


def _duration(seconds) -> str:
    locale = prefs()[0]
    return digits(format_timedelta(timedelta(seconds=float(seconds)), locale=locale, threshold=2))


@bp.app_template_global()
def alert_summary(alert) -> str:
    """An alert's summary in the reader's language; English readers get the stored text as it is, and so does
    a rule or a detail this page does not know."""
    if prefs()[0] == "en" or alert.get("rule") not in _SUMMARIES:
        return Markup.escape(alert.get("summary") or "")
    d = alert.get("details") or {}
    template, needed = _SUMMARIES[alert["rule"]]
    if any(k not in d for k in needed):
        return Markup.escape(alert.get("summary") or "")
    island = Markup('<bdi dir="ltr">%s</bdi>')
    values = {"n": num(d.get("dead", d.get("jobs", 0))), "threshold": num(d.get("threshold", 0)),
              "window": _duration(d.get("window_seconds", 0)), "code": island % d.get("error_code", ""),
              "queue": island % d.get("queue", ""), "age": _duration(d.get("oldest_age_seconds", 0)),
              "target": _duration(d.get("target_seconds", 0))}
    return Markup(Markup.escape(str(template)) % values)
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
