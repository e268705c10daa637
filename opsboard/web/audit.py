"""The audit page: every recorded action, filterable, admins and ops only."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from flask import Blueprint, render_template, request

from .. import audit
from .app import get_db
from .errors import ApiError
from .security import current_scope, requires

bp = Blueprint("audit", __name__, url_prefix="/audit")

PAGE_SIZE = 50


def _date(name: str) -> datetime | None:
    raw = request.args.get(name, "").strip()
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ApiError(400, "invalid_date", f"{name} must be a date like 2026-11-29") from None
    # The page shows UTC; a date without an offset means UTC too, whatever the
    # database session's TimeZone is.
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _filters() -> dict:
    since, until = _date("since"), _date("until")
    if until is not None and len(request.args.get("until", "").strip()) == 10:
        until = until + timedelta(days=1)  # a plain date includes that whole day
    cursor = None
    raw_cursor = request.args.get("after", "")
    if raw_cursor:
        try:
            at, rid = raw_cursor.split("_", 1)
            cursor = (datetime.fromisoformat(at), uuid.UUID(rid))
        except ValueError:
            raise ApiError(400, "invalid_cursor", "after must be a cursor from a previous page") from None
    return {"actor": request.args.get("actor", "").strip() or None,
            "action": request.args.get("action", "").strip() or None,
            "target_type": request.args.get("target_type", "").strip() or None,
            "target_id": request.args.get("target_id", "").strip() or None,
            "since": since, "until": until, "after": cursor}


def _page():
    filters = _filters()
    with get_db().connection() as conn:
        rows = audit.list_records(conn, current_scope("audit.view"), limit=PAGE_SIZE + 1, **filters)
        actions = audit.actions(conn)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    for row in rows:  # shown as "When (UTC)"; the same instant, so the cursor is unchanged
        row["at"] = row["at"].astimezone(timezone.utc)
    next_cursor = f"{rows[-1]['at'].isoformat()}_{rows[-1]['id']}" if more and rows else None
    args = {k: v for k, v in request.args.items() if k != "after"}
    return {"rows": rows, "next_cursor": next_cursor, "args": args, "actions": actions}


@bp.route("/")
@requires("audit.view")
def index():
    return render_template("audit/index.html", **_page())


@bp.route("/_rows")
@requires("audit.view")
def rows():
    return render_template("audit/_rows.html", **_page())
