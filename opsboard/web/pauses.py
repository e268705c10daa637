"""Incident controls on the dashboard (issue 28): hold and release a queue, a job type,
a tenant or a provider, with a reason and an optional resume time.

Operator staff (``jobs.pause`` on every tenant) may hold anything; a tenant's own
ops staff may hold only their tenant; support agents and template authors never.
Holding the critical queue or the OTP type asks for a second confirmation (a
checkbox the core requires).  The core does the work: :mod:`opsboard.pauses`.
"""
from __future__ import annotations

from datetime import datetime, time, timezone

from flask import Blueprint, flash, redirect, render_template, request
from flask_babel import gettext as _

from .. import pauses, persian
from ..errors import OpsError
from .context import get_db
from .errors import ApiError
from .forms import actor, arg_time, reason, request_key
from .i18n import prefs
from .security import current_scope, require_for_tenant, requires, audit_denied

bp = Blueprint("pauses", __name__, url_prefix="/pauses")


def kind_label(kind: str) -> str:
    return {"queue": _("queue"), "type": _("job type"), "tenant": _("tenant"), "provider": _("provider"),
            "key": _("each key of job type")}.get(kind, kind)


@bp.app_context_processor
def _globals() -> dict:
    from .forms import request_key_field
    return {"kind_label": kind_label, "request_key_field": request_key_field}


def _next() -> str:
    """Where to go back to: a path on this site only (never another host)."""
    target = (request.values.get("next") or "").strip()
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/queues/"
    return target


def _kind_target(kinds: tuple[str, ...] = pauses.KINDS) -> tuple[str, str]:
    kind = (request.values.get("kind") or "").strip()
    target = (request.values.get("target") or "").strip()
    if kind not in kinds:
        raise ApiError(400, "invalid_kind", _("kind must be one of %(kinds)s", kinds=", ".join(kinds)))
    if not target or len(target) > 200:
        raise ApiError(400, "invalid_target", _("Name what to pause."))
    return kind, target


def whole_number(name: str, high: int) -> int | None:
    """A form's whole number from 1 to ``high``, or ``None`` when empty (back to the default); 400 otherwise."""
    raw = (request.form.get(name) or "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12 or not 1 <= int(raw) <= high:
        raise ApiError(400, "invalid_limit", _("A limit is a whole number from 1 to %(high)s; leave it empty to go "
                                               "back to the default.", high=high))
    return int(raw)


def _check_allowed(conn, kind: str, target: str):
    """403 unless the user may hold ``kind``/``target``: staff for anything, a tenant's ops for that tenant.
    Returns the tenant's id for a tenant hold."""
    tenant_id = None
    scope = current_scope("jobs.pause")
    if kind == "tenant" and scope.all:
        tenant_id = pauses.resolve_target(conn, kind, target)[1]  # staff see every tenant: 404 when none
    elif kind == "tenant":
        # A tenant's ops user is answered alike for another tenant's slug and for one that does not
        # exist (403 both), so that the pages do not tell which tenants exist (issue 51): the slug is
        # only ever found among the user's own tenants.
        try:
            tenant_id = pauses.resolve_target(conn, kind, target)[1]
        except OpsError:
            tenant_id = None
        if tenant_id is None or tenant_id not in scope.ids:
            audit_denied("jobs.pause")
            raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s for this tenant.",
                                               permission="jobs.pause"))
        require_for_tenant("jobs.pause", tenant_id)
    elif not scope.all:
        audit_denied("jobs.pause")
        raise ApiError(403, "forbidden", _("Only operator staff may pause a queue, a job type or a provider."))
    return tenant_id


def visible_holds(conn) -> list[dict]:
    """The holds in force the current user may see: all for operator staff, their tenants' for others."""
    scope = current_scope("jobs.view")
    rows = pauses.list_pauses(conn)
    return rows if scope.all else [r for r in rows if r["kind"] == "tenant" and scope.allows(r["tenant_id"])]


def holds_context(conn) -> dict:
    """What a page that shows holds and pause controls needs (queue health, tenants, deliveries)."""
    rows = visible_holds(conn)
    staff = current_scope("jobs.pause").all
    return {"holds": rows, "held": pauses.held(rows), "can_pause_all": staff,
            "pause_scope": current_scope("jobs.pause"), "live_limits": pauses.list_limits(conn),
            # Keys span tenants: operator staff only (issue 50).
            "keys_in_flight": pauses.keys_in_flight(conn) if staff else [],
            "keyed_types": [(t, pauses.catalogue_limit("key", t)) for t in pauses.keyed_types()] if staff else []}


def _resume_at():
    """When to resume by itself: ``resume_at`` (ISO, UTC unless it names its zone: the form's API), or
    the form's ``resume_day`` (a date picker's ISO day, or a Jalali day on Jalali pages) and
    ``resume_time`` (HH:MM, midnight if empty) in the viewer's own time zone (issue 44: fa pages
    asked in UTC and the Gregorian calendar)."""
    if (request.form.get("resume_at") or "").strip():
        return arg_time("resume_at", request.form)
    day = (request.form.get("resume_day") or "").strip()
    clock = persian.latin_digits((request.form.get("resume_time") or "").strip())
    if not day:
        if clock:
            raise ApiError(400, "invalid_date", _("Give the day to resume on, not only the time."), field="resume_day")
        return None
    try:
        when = datetime.combine(persian.parse_day(day), time.fromisoformat(clock) if clock else time())
    except ValueError:
        raise ApiError(400, "invalid_date", _("The day or time to resume is not one."), field="resume_day") from None
    return when.replace(tzinfo=persian.zone(prefs()[2])).astimezone(timezone.utc)


@bp.route("/new")
@requires("jobs.pause")
def new():
    kind, target = _kind_target()
    with get_db().connection() as conn:
        _check_allowed(conn, kind, target)
        pauses.resolve_target(conn, kind, target)
    return render_template("pauses/new.html", kind=kind, target=target, next=_next(),
                           confirm=pauses.needs_confirmation(kind, target))


@bp.route("/pause", methods=["POST"])
@requires("jobs.pause")
def pause():
    kind, target = _kind_target()
    resume_at = _resume_at()
    with get_db().connection() as conn:
        _check_allowed(conn, kind, target)
        pauses.pause(conn, actor(), kind, target, reason(), resume_at=resume_at, request_key=request_key(),
                     confirmed=request.form.get("confirm") == "yes")
    # Said on the page it goes back to (issue 44: no word after a pause or a resume before).
    flash(_("Paused %(kind)s %(target)s: nothing of it is claimed until it is resumed.",
            kind=kind_label(kind), target=target))
    return redirect(_next(), code=303)


@bp.route("/resume", methods=["POST"])
@requires("jobs.pause")
def resume():
    kind, target = _kind_target()
    with get_db().connection() as conn:
        _check_allowed(conn, kind, target)
        pauses.resume(conn, actor(), kind, target, reason(), request_key=request_key())
    flash(_("Resumed %(kind)s %(target)s: its jobs are claimed again.", kind=kind_label(kind), target=target))
    return redirect(_next(), code=303)


@bp.route("/limit")
@requires("jobs.pause")
def limit_form():
    kind, target = _kind_target(pauses.KINDS + ("key",))
    if kind not in pauses.LIMIT_KINDS:
        raise ApiError(400, "invalid_kind", _("kind must be one of %(kinds)s", kinds=", ".join(pauses.LIMIT_KINDS)))
    with get_db().connection() as conn:
        _check_allowed(conn, kind, target)
        if kind == "key":   # the running jobs per concurrency key of a job type (issue 50)
            if target not in pauses.keyed_types():
                raise ApiError(404, "not_found", _("no job type %(target)s with a concurrency key", target=target))
        else:
            pauses.resolve_target(conn, kind, target)
        live = pauses.list_limits(conn).get((kind, target))
    return render_template("pauses/limit.html", kind=kind, target=target, next=_next(), live=live,
                           catalogue=pauses.catalogue_limit(kind, target), bounds=pauses.limit_bounds(kind))


@bp.route("/limit", methods=["POST"])
@requires("jobs.pause")
def set_limit():
    kind, target = _kind_target(pauses.KINDS + ("key",))
    value = whole_number("value", pauses.limit_bounds(kind)[1])
    with get_db().connection() as conn:
        _check_allowed(conn, kind, target)
        pauses.set_limit(conn, actor(), kind, target, value, reason(), request_key=request_key())
    return redirect(_next(), code=303)
