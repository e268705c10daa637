"""The end user's inbox page (/inbox/): unread badge, mark read/archived, live rows over SSE.

Signed in with the dashboard session (no bearer token in the browser):
``/inbox/stream`` is the same stream as ``/api/v1/inbox/stream``.
"""
from __future__ import annotations

import uuid

from flask import Blueprint, render_template, request
from flask_babel import gettext as _
from flask_login import current_user, login_required

from ..notifications import inbox
from . import sse
from .context import get_db
from .errors import ApiError

bp = Blueprint("inbox", __name__, url_prefix="/inbox")


def _context(before=None):
    with get_db().connection() as conn:
        page = inbox.page(conn, current_user.id, before=before, limit=30)
        unread = inbox.unread_count(conn, current_user.id)
    return {"items": page["items"], "next_cursor": page["next_cursor"], "unread": unread}


@bp.route("/")
@login_required
def index():
    raw = request.args.get("cursor")
    try:
        before = int(raw) if raw else None
    except ValueError:
        raise ApiError(400, "invalid_cursor", _("cursor must be an integer")) from None
    return render_template("inbox/index.html", **_context(before))


@bp.route("/_badge")
@login_required
def badge():
    with get_db().connection() as conn:
        unread = inbox.unread_count(conn, current_user.id)
    return render_template("inbox/_badge.html", unread=unread)


@bp.route("/<uuid:notification_id>/<state>", methods=["POST"])
@login_required
def mark(notification_id: uuid.UUID, state: str):
    if state not in inbox.STATES:
        raise ApiError(404, "not_found", _("No such state."))
    with get_db().connection() as conn:
        inbox.mark(conn, current_user.id, notification_id, state)
        row = inbox.get(conn, current_user.id, notification_id)
        unread = inbox.unread_count(conn, current_user.id)
    return render_template("inbox/_item.html", n=row, unread=unread, oob_badge=True)


@bp.route("/stream")
@login_required
def stream():
    try:
        return sse.stream_response(current_user.id)
    except sse.TooManyStreams:
        raise ApiError(429, "too_many_streams", _("Too many open streams; close a tab.")) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None
