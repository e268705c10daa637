"""The audit page: every recorded action, filterable, admins and ops only."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from flask import Blueprint, render_template, request
from flask_babel import gettext as _

from .. import audit
from . import forms
from .context import read_connection
from .errors import ApiError
from .i18n import staff_label
from .security import current_scope, requires

bp = Blueprint("audit", __name__, url_prefix="/audit")

PAGE_SIZE = 50


#: The page's query arguments: what its links carry (the cursor is added apart).
PAGE_ARGS = ("actor", "action", "target_type", "target_id", "since", "until")


def _cursor(raw: str) -> tuple[datetime, uuid.UUID] | None:
    """The ``after`` cursor of a previous page: ``<at ISO>_<id>``."""
    if not raw:
        return None
    try:
        at, rid = raw.split("_", 1)
        moment = datetime.fromisoformat(at)
        return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)), uuid.UUID(rid)
    except ValueError:
        raise ApiError(400, "invalid_cursor", _("after must be a cursor from a previous page")) from None


def _filters() -> dict:
    # The page shows UTC; a date without an offset means UTC too, whatever the
    # database session's TimeZone is (forms.arg_time).
    since, until = forms.arg_time("since"), forms.arg_time("until")
    if until is not None and len(request.args.get("until", "").strip()) == 10:
        until = until + timedelta(days=1)  # a plain date includes that whole day
    return {"actor": forms.arg_text("actor"), "action": forms.arg_text("action"),
            "target_type": forms.arg_text("target_type"), "target_id": forms.arg_text("target_id", max_len=500),
            "since": since, "until": until, "after": _cursor(request.args.get("after", "").strip())}


def _without(value, secret: str):
    """``value`` (JSON) with every occurrence of ``secret`` in its text replaced."""
    if isinstance(value, dict):
        return {k: _without(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, secret) for v in value]
    if isinstance(value, str):
        return value.replace(secret, "operator staff")
    return value


def _page():
    filters = _filters()
    scope = current_scope("audit.view")
    with read_connection() as conn:
        rows = audit.list_records(conn, scope, limit=PAGE_SIZE + 1, **filters)
        actions = audit.actions(conn, scope)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    for row in rows:  # shown as "When (UTC)"; the same instant, so the cursor is unchanged
        row["at"] = row["at"].astimezone(timezone.utc)
        if row.get("staff_role") and not scope.all:
            # Tenant-scoped viewers see the platform's staff by role, never by address.
            label = row["actor_label"]
            row["actor_label"] = staff_label(row["staff_role"])
            row["before"], row["after"] = _without(row["before"], label), _without(row["after"], label)
    next_cursor = f"{rows[-1]['at'].isoformat()}_{rows[-1]['id']}" if more and rows else None
    args = forms.link_args(PAGE_ARGS)
    return {"rows": rows, "next_cursor": next_cursor, "args": args, "actions": actions}


@bp.route("/")
@requires("audit.view")
def index():
    return render_template("audit/index.html", **_page())


@bp.route("/_rows")
@requires("audit.view")
def rows():
    return render_template("audit/_rows.html", **_page())
