"""The end user's inbox page (/inbox/): unread badge, mark read/archived, live rows over SSE;
and their notification settings (/inbox/preferences): categories per channel in
each tenant they belong to, and quiet hours.

Signed in with the dashboard session (no bearer token in the browser):
``/inbox/stream`` is the same stream as ``/api/v1/inbox/stream``.  Saving a
setting is the user's own action: audited like the display settings
(``user.notification_prefs``, ``user.quiet_hours``), no reason asked.
"""
from __future__ import annotations

import uuid
from datetime import time

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from flask_login import current_user, login_required

from .. import audit
from ..errors import OpsError
from ..notifications import inbox, preferences
from ..channels import channel_names
from . import sse
from .context import get_db, request_id
from .errors import ApiError
from .i18n import channel_label

bp = Blueprint("inbox", __name__, url_prefix="/inbox")
# The page an inbox row is about (issue 43): its "Open" link on the rendered rows.
bp.add_app_template_global(sse.inbox_link, "inbox_link")


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
        if before is not None and not 0 <= before <= inbox.MAX_CURSOR:
            raise ValueError(raw)
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
def stream():
    # With a stream server, answer at once (it checks the session cookie itself); else sign-in first.
    return sse.redirect_response() or _own_stream()


@login_required
def _own_stream():
    try:
        return sse.stream_response(current_user.id)
    except sse.StreamsFull:
        raise ApiError(503, "streams_full", _("Live updates are busy; checking every few seconds instead."),
                       headers={"Retry-After": str(sse.RETRY_AFTER)}) from None
    except sse.TooManyStreams:
        raise ApiError(429, "too_many_streams", _("Too many open streams; close a tab.")) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None


@bp.route("/_since")
@login_required
def since():
    """New rows after ``since`` (oldest first), as the stream's event data: the page polls this when
    the stream is refused (503) or keeps failing."""
    raw = request.args.get("since", "")
    try:
        cursor = int(raw)
        if not 0 <= cursor <= inbox.MAX_CURSOR:
            raise ValueError(raw)
    except ValueError:
        raise ApiError(400, "invalid_cursor", _("cursor must be an integer")) from None
    with get_db().connection() as conn:
        rows = inbox.since(conn, current_user.id, cursor)
    return jsonify({"items": [sse.event_data(r) for r in rows]})


# ---------------------------------------------------------------- preferences

#: Names of the categories and channels on the settings page (the core's names are ids).
CATEGORY_LABELS = {"otp": _l("One-time codes"), "security": _l("Security alerts"), "financial": _l("Payments"),
                   "official": _l("Official notices"), "account": _l("Account"), "ticket": _l("Support tickets"),
                   "system": _l("Platform notices"), "alerts": _l("Queue alerts"),
                   "alerts_critical": _l("Critical queue alerts")}
DAY_LABELS = [(1, _l("Mon")), (2, _l("Tue")), (3, _l("Wed")), (4, _l("Thu")), (5, _l("Fri")), (6, _l("Sat")),
              (7, _l("Sun"))]
_ERRORS = {"critical_category": _l("Critical notifications such as one-time codes cannot be turned off."),
           "invalid_category": _l("Unknown category."), "invalid_channel": _l("Unknown channel."),
           "invalid_time_zone": _l("Unknown time zone."), "invalid_window": _l("The start and end must differ."),
           "invalid_time": _l("Enter times as HH:MM."), "no_days": _l("Choose at least one day.")}


def _membership(slug: str | None):
    """The signed-in user's tenant ``slug`` (default: their first); 404 for any other tenant."""
    mine = sorted(current_user.memberships, key=lambda m: m.tenant_slug)
    for m in mine:
        if not slug or m.tenant_slug == slug:
            return m
    raise ApiError(404, "not_found", _("No such tenant."))


def _tenants():
    return sorted({(m.tenant_slug, m.tenant_name) for m in current_user.memberships})


def _actor():
    return audit.Actor(current_user.email, current_user.id, request_id())


def _prefs_context(conn, membership, **extra) -> dict:
    return {"tenant": membership, "rows": preferences.grid(conn, membership.tenant_id, current_user.id),
            "channels": channel_names(), "category_labels": CATEGORY_LABELS,
            "channel_labels": {c: channel_label(c) for c in channel_names()}, **extra}


def _quiet_context(conn, form=None, **extra) -> dict:
    row = preferences.quiet_hours(conn, current_user.id)
    if form is None:
        form = {"enabled": bool(row and row["enabled"]),
                "time_zone": row["time_zone"] if row else (current_user.time_zone or "Asia/Tehran"),
                "start": (row["start_time"] if row else time(22, 0)).strftime("%H:%M"),
                "end": (row["end_time"] if row else time(7, 0)).strftime("%H:%M"),
                "days": list(row["days"]) if row else [1, 2, 3, 4, 5, 6, 7]}
    return {"quiet": form, "day_labels": DAY_LABELS, **extra}


def _partial_or_page(template: str, status: int, **ctx):
    """The htmx partial, or (no htmx) the whole settings page around it."""
    if request.headers.get("HX-Request"):
        return render_template(template, **ctx), status
    membership = ctx.get("tenant") or _membership(request.form.get("tenant"))
    with get_db().connection() as conn:
        page = {**_prefs_context(conn, membership), **_quiet_context(conn), **ctx}
    return render_template("inbox/preferences.html", tenants=_tenants(), **page), status


@bp.route("/preferences")
@login_required
def preferences_page():
    membership = _membership(request.args.get("tenant"))
    with get_db().connection() as conn:
        ctx = {**_prefs_context(conn, membership), **_quiet_context(conn)}
    return render_template("inbox/preferences.html", tenants=_tenants(), **ctx)


@bp.route("/preferences", methods=["POST"])
@login_required
def save_preferences():
    """The category x channel grid of one tenant: ``pref:<category>:<channel>`` = 1 / 0 (last value wins)."""
    membership = _membership(request.form.get("tenant"))
    choices = {}
    for name in request.form:
        kind, _sep, rest = name.partition(":")
        if kind == "pref":
            category, _sep, channel = rest.partition(":")
            choices[(category, channel)] = request.form.getlist(name)[-1] == "1"
    with get_db().connection() as conn:
        try:
            with conn.transaction():
                changed = preferences.save_choices(conn, membership.tenant_id, current_user.id, choices)
                if changed:
                    audit.record(conn, _actor(), "user.notification_prefs", target_type="user",
                                 target_id=current_user.id, tenant_id=membership.tenant_id, after=changed)
        except OpsError as exc:
            return _partial_or_page("inbox/_preferences_form.html", 422,
                                    **_prefs_context(conn, membership, error=_ERRORS.get(exc.code, str(exc)),
                                                     error_code=exc.code))
        if not request.headers.get("HX-Request"):
            return redirect(url_for("inbox.preferences_page", tenant=membership.tenant_slug), 303)
        return render_template("inbox/_preferences_form.html",
                               **_prefs_context(conn, membership, saved=True)), 200


@bp.route("/preferences/quiet", methods=["POST"])
@login_required
def save_quiet_hours():
    """Quiet hours: enabled, time zone, start and end (HH:MM), days (ISO 1-7)."""
    f = request.form
    form = {"enabled": f.getlist("enabled")[-1:] == ["1"], "time_zone": (f.get("time_zone") or "").strip(),
            "start": (f.get("start") or "").strip(), "end": (f.get("end") or "").strip(), "days": []}
    errors = {}
    try:
        form["days"] = sorted({int(d) for d in f.getlist("days") if 1 <= int(d) <= 7})
    except ValueError:
        form["days"] = []
    if not form["days"]:
        errors["days"] = "no_days"
    try:
        start, end = time.fromisoformat(form["start"]), time.fromisoformat(form["end"])
    except ValueError:
        start = end = None
        errors["window"] = "invalid_time"
    with get_db().connection() as conn:
        if not errors:
            try:
                with conn.transaction():
                    row = preferences.set_quiet_hours(conn, current_user.id, form["time_zone"], start, end,
                                                      form["days"], enabled=form["enabled"])
                    audit.record(conn, _actor(), "user.quiet_hours", target_type="user", target_id=current_user.id,
                                 after={"enabled": row["enabled"], "time_zone": row["time_zone"],
                                        "start": form["start"], "end": form["end"], "days": form["days"]})
            except OpsError as exc:
                errors["time_zone" if exc.code == "invalid_time_zone" else "window"] = exc.code
        if errors:
            return _partial_or_page("inbox/_quiet_form.html", 422, **_quiet_context(
                conn, form, errors={k: _ERRORS[v] for k, v in errors.items()}, error_codes=sorted(errors.values())))
        if not request.headers.get("HX-Request"):
            return redirect(url_for("inbox.preferences_page"), 303)
        return render_template("inbox/_quiet_form.html", **_quiet_context(conn, saved=True)), 200
