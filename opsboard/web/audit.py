"""The audit page: every recorded action, filterable, admins and ops only."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from flask import Blueprint, render_template, request
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from markupsafe import Markup

from .. import audit
from . import forms
from .context import read_connection
from .errors import ApiError
from .i18n import action_label, fmt_day, staff_label
from .reports import report_title
from .security import current_scope, requires

bp = Blueprint("audit", __name__, url_prefix="/audit")

#: What an audit record is about, as a word of the reader's language (the raw type on hover).
TARGET_LABELS = {
    "alert": _l("alert"), "api_key": _l("API key"), "job": _l("job"), "job_filter": _l("job filter"),
    "outbox_event": _l("event"), "report": _l("report"), "template": _l("template"), "tenant": _l("tenant"),
    "ticket": _l("ticket"), "user": _l("user"), "webhook_endpoint": _l("webhook endpoint"),
    "queue": _l("queue"), "job_type": _l("job type"), "provider": _l("provider"),
}

#: Reasons the system writes itself (in English, in the core), shown in the reader's language.
SYSTEM_REASONS = {
    "the condition cleared": _l("the condition cleared"),
    "automatic resume (resume_at passed)": _l("automatic resume (resume_at passed)"),
    "first_response due time passed": _l("first response due time passed"),
    "resolution due time passed": _l("resolution due time passed"),
}


@bp.app_template_global()
def audit_target_label(target_type) -> str:
    label = TARGET_LABELS.get(str(target_type))
    return str(label) if label is not None else str(target_type).replace("_", " ")


@bp.app_template_global()
def audit_reason(record) -> Markup | str:
    """A record's reason: a person's words as written (their own direction), a reason of the system in the
    reader's language (a ticket action's label, a fixed sentence; a report request's parameters as codes)."""
    from ..tickets import workflow

    reason = record.get("reason") or ""
    if reason in SYSTEM_REASONS:
        return str(SYSTEM_REASONS[reason])
    action = record.get("action") or ""
    if action.startswith("ticket."):
        declared = workflow.ALL.get(action.split(".", 1)[1])
        if declared is not None and reason == declared.label:
            return action_label(declared)
    if action == "report.request" and reason:
        # The kind in words and its period in the reader's calendar (the record's "after" holds the parameters).
        after = record.get("after") or {}
        params = dict(after.get("params") or {})
        text = Markup.escape(report_title(after.get("kind") or reason.partition(" ")[0]))
        if params.get("date_from") and params.get("date_to"):
            text += Markup(" · ") + _("%(start)s to %(end)s", start=fmt_day(params.pop("date_from")),
                                      end=fmt_day(params.pop("date_to")))
        rest = " ".join(str(value) for value in params.values() if value)
        return text + (Markup(' <bdi dir="ltr">%s</bdi>') % rest if rest else "")
    return Markup('<bdi dir="auto">%s</bdi>') % reason

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
