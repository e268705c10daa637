"""Ops view of notifications: for an event or an inbox row, its deliveries per channel
(status, suppression reason, deferral, template version, job); else the latest deliveries."""
from __future__ import annotations

from flask import Blueprint, render_template

from ..notifications import tracking
from . import forms
from .context import get_db
from .security import current_scope, requires

bp = Blueprint("notifications", __name__, url_prefix="/notifications")


@bp.route("/")
@requires("jobs.view")
def index():
    event_id = forms.arg_uuid("event_id")
    notification_id = forms.arg_uuid("notification_id")
    scope = current_scope("jobs.view")
    with get_db().connection() as conn:
        if event_id or notification_id:
            rows = tracking.deliveries_for(conn, scope, event_id=event_id, notification_id=notification_id)
        else:
            rows = tracking.recent(conn, scope, limit=100)
    return render_template("notifications/index.html", rows=rows, event_id=event_id, notification_id=notification_id)
