"""Ops view of notifications: for an event or an inbox row, its deliveries per channel
(status, suppression reason, deferral, template version, job); else the latest deliveries.
Below them, the digests that wait to be sent (opsboard.notifications.digest), in the viewer's scope."""
from __future__ import annotations

from flask import Blueprint, render_template
from flask_babel import lazy_gettext as _l

from ..notifications import digest, tracking
from . import forms
from .context import get_db
from .security import current_scope, requires

bp = Blueprint("notifications", __name__, url_prefix="/notifications")

#: A digest's kind as the pending digests' table names it.
DIGEST_KINDS = {"window": _l("a window from the first item"), "schedule": _l("at a time of day"),
                "quiet": _l("after quiet hours")}


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
        pending = digest.pending(conn, None if scope.all else scope.ids, limit=100)
    return render_template("notifications/index.html", rows=rows, event_id=event_id, notification_id=notification_id,
                           digests=pending, digest_kinds={k: str(v) for k, v in DIGEST_KINDS.items()})
