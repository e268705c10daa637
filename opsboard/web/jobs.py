"""Jobs: the filterable list, a job's page and payload, and the operator
actions on jobs (replay, resolve/ignore, cancel, run now), in bulk by filter
(cancel waiting, replay dead, delete dead: each bound to what its confirmation
counted, :mod:`opsboard.jobqueue.bulk` and :mod:`.previews`) and on the ticked
rows of the list (replay, cancel, delete, run now exactly those).

Actions are POST + CSRF, need a reason and a request key, check the
permission for the job's own tenant, write an audit row (in the core), and
answer with a partial that htmx swaps in next to the form.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from flask import Blueprint, abort, make_response, render_template, request, url_for
from flask_babel import gettext as _
from flask_login import current_user

from .. import dashboard, jobqueue, jobtypes
from ..config import QUEUE_NAMES
from ..jobqueue import bulk
from ..schema import JobStatus
from . import forms, previews
from .context import get_config, get_db, read_connection
from .errors import ApiError
from .security import audit_denied, current_scope, require_for_tenant, requires

bp = Blueprint("jobs", __name__, url_prefix="/jobs")
bp.context_processor(forms.form_globals)
bp.context_processor(lambda: {"utc_now": lambda: datetime.now(timezone.utc)})  # "run now" shows for a future job

STATUSES = [s.value for s in JobStatus]
#: Dead jobs replayed by one "replay all matching" request at most.
BULK_LIMIT = 1000
#: The bulk cancel's preview counts this many matching jobs at most, then says "10,000+".
COUNT_CAP = 10_000


#: The job list's query arguments: what its links and HX-Push-Url carry.
LIST_ARGS = ("queue", "type", "tenant_id", "status", "error_code", "correlation_id", "event_id", "since", "until",
             "q", "before")


def _filter() -> dashboard.JobFilter:
    queue_name = forms.arg_text("queue")
    if queue_name is not None and queue_name not in QUEUE_NAMES:
        raise ApiError(400, "invalid_filter", _("queue must be one of %(names)s", names=", ".join(QUEUE_NAMES)))
    f = dashboard.JobFilter(
        queue=queue_name, type=forms.arg_text("type"), tenant_id=forms.arg_uuid("tenant_id"),
        status=forms.arg_text("status"),
        error_code=forms.arg_text("error_code"), correlation_id=forms.arg_text("correlation_id"),
        event_id=forms.arg_uuid("event_id"), since=forms.arg_time("since"), until=forms.arg_time("until"),
        search=forms.arg_text("q"), before=forms.arg_uuid("before"))
    return f.validate()


def _list_context() -> dict:
    f = _filter()
    scope = current_scope("jobs.view")
    with read_connection() as conn:
        page = dashboard.list_jobs(conn, scope, f)
        tenants = dashboard.tenant_options(conn, scope)
    args = forms.link_args(LIST_ARGS, drop=("before",))
    return {"page": page, "filter": f, "args": args, "tenants": tenants, "statuses": STATUSES,
            "detail_window_minutes": int(dashboard.SEARCH_DETAIL_WINDOW.total_seconds() // 60),
            "queues": QUEUE_NAMES, "types": sorted({jt.name for jt in jobtypes.all_types()})}


@bp.route("/")
@requires("jobs.view")
def index():
    return render_template("jobs/index.html", **_list_context())


@bp.route("/_rows")
@requires("jobs.view")
def rows():
    response = make_response(render_template("jobs/_rows.html", **_list_context()))
    # The address bar shows the page, not the partial: reloading it works.
    response.headers["HX-Push-Url"] = url_for("jobs.index", **forms.link_args(LIST_ARGS))
    return response


@bp.route("/<uuid:job_id>")
@requires("jobs.view")
def detail(job_id):
    with get_db().connection() as conn:
        d = dashboard.job_detail(conn, current_scope("jobs.view"), job_id)
    if d is None:
        abort(404, _("No such job, or it belongs to a tenant you cannot see."))
    return render_template("jobs/detail.html", d=d, job=d.job)


@bp.route("/<uuid:job_id>/payload")
@requires("jobs.view")
def payload(job_id):
    with get_db().connection() as conn:
        found = dashboard.job_payload(conn, current_scope("jobs.view"), job_id)
    if found is None:
        abort(404, _("No such job, or it belongs to a tenant you cannot see."))
    job, text = found
    return render_template("jobs/payload.html", job=job, text=text)


def _job_for_action(conn, job_id, permission: str) -> dict:
    """The job, visible to the user (else 404) and actionable for its tenant (else 403)."""
    job = jobqueue.get_job(conn, job_id, current_scope("jobs.view"))
    if job is None:
        raise ApiError(404, "not_found", _("No such job, or it belongs to a tenant you cannot see."))
    require_for_tenant(permission, job["tenant_id"])
    return job


@bp.route("/<uuid:job_id>/replay", methods=["POST"])
@requires("jobs.replay")
def replay(job_id):
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        _job_for_action(conn, job_id, "jobs.replay")
        new = jobqueue.replay(conn, job_id, forms.actor(), reason, key, scope=current_scope("jobs.replay"))
    return _job_page_after(job_id, action="replay", new_jobs=[new], reason=reason)


@bp.route("/<uuid:job_id>/resolve", methods=["POST"])
@requires("jobs.resolve")
def resolve(job_id):
    reason, key = forms.reason(), forms.request_key()
    resolution = request.form.get("resolution", "resolved")
    with get_db().connection() as conn:
        _job_for_action(conn, job_id, "jobs.resolve")
        row = dashboard.resolve(conn, job_id, resolution, forms.actor(), reason, key,
                                scope=current_scope("jobs.resolve"))
    return _job_page_after(job_id, action="resolve", resolution=row, reason=reason)


@bp.route("/<uuid:job_id>/cancel", methods=["POST"])
@requires("jobs.cancel")
def cancel(job_id):
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        _job_for_action(conn, job_id, "jobs.cancel")
        row = jobqueue.cancel(conn, job_id, actor=forms.actor(), reason=reason, request_key=key,
                           scope=current_scope("jobs.cancel"))
    return forms.render_result("jobs/_action_result.html", action="cancel", job_id=job_id, job=row,
                               reason=reason)


def _job_page_after(job_id, **result):
    """After a replay or resolve, the job's page as it now is (its replays, its resolution, the forms
    that still apply, each with a fresh request key) with the action's result on top.  For htmx it
    replaces the page's ``#job-page`` (errors, 4xx, still go to the form's own target)."""
    with get_db().connection() as conn:
        d = dashboard.job_detail(conn, current_scope("jobs.view"), job_id)
    if d is None:
        return forms.render_result("jobs/_action_result.html", job_id=job_id, **result)
    if not request.headers.get("HX-Request"):
        return render_template("jobs/detail.html", d=d, job=d.job, job_id=job_id, **result)
    response = make_response(render_template("jobs/_detail.html", d=d, job=d.job, job_id=job_id, **result))
    response.headers["HX-Retarget"] = "#job-page"
    response.headers["HX-Reswap"] = "outerHTML"
    return response


#: The bulk filter's state choices (waiting jobs) and its age bound.
WAITING_STATES = ("pending", "retryable")
MAX_AGE_DAYS = 3650


def _bulk_filter(source, *, waiting: bool) -> bulk.BulkFilter:
    """A bulk action's filter from a query or a form: type, queue, tenant, error code, and for waiting
    jobs their state and an age in hours (``older_than_hours``), for dead jobs an age in days
    (``older_than_days``).  Bad values are 400 ``invalid_filter``."""
    queue_name = forms.arg_text("queue", source)
    if queue_name is not None and queue_name not in QUEUE_NAMES:
        raise ApiError(400, "invalid_filter", _("queue must be one of %(names)s", names=", ".join(QUEUE_NAMES)))
    status = forms.arg_text("status", source) if waiting else None
    if status is not None and status not in WAITING_STATES:
        raise ApiError(400, "invalid_filter", _("status must be one of %(names)s", names=", ".join(WAITING_STATES)))
    name = "older_than_hours" if waiting else "older_than_days"
    raw = forms.arg_text(name, source, max_len=12)
    older_than = None
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not 0 <= value <= (MAX_AGE_DAYS * (24 if waiting else 1)) or value != value:
            raise ApiError(400, "invalid_filter", _("%(name)s must be a number from 0 to %(max)s", name=name,
                                                    max=MAX_AGE_DAYS * (24 if waiting else 1)))
        older_than = timedelta(hours=value) if waiting else timedelta(days=value)
    return bulk.BulkFilter(type=forms.arg_text("type", source), queue=queue_name,
                           tenant_id=forms.arg_uuid("tenant_id", source),
                           error_code=forms.arg_text("error_code", source), status=status, older_than=older_than)


def _confirm(partial: str, **context):
    """A bulk confirmation: the partial for htmx, else a page around it."""
    context.update(queues=QUEUE_NAMES, waiting_states=WAITING_STATES)
    if request.headers.get("HX-Request"):
        return render_template(partial, **context)
    with read_connection() as conn:
        context["tenants"] = dashboard.tenant_options(conn, current_scope("jobs.view"))
    return render_template("jobs/result.html", partial=partial, **context)


def _outdated(exc: bulk.PreviewOutdated, again: str, **args):
    """409: more jobs match than were confirmed; nothing done; the link to count again."""
    return forms.render_result("jobs/_bulk_result.html", status=409, action="outdated", previewed=exc.previewed,
                               now_matching=exc.now_matching,
                               again=url_for(again, **{k: v for k, v in args.items() if v is not None}))


def _filter_args(f: bulk.BulkFilter, *, waiting: bool) -> dict:
    args = {"type": f.type, "queue": f.queue, "tenant_id": f.tenant_id, "error_code": f.error_code,
            "status": f.status}
    if f.older_than is not None:
        seconds = f.older_than.total_seconds()
        args["older_than_hours" if waiting else "older_than_days"] = (
            f"{seconds / 3600:g}" if waiting else f"{seconds / 86400:g}")
    return args


@bp.route("/cancel-many/confirm")
@requires("jobs.cancel")
def cancel_many_confirm():
    """How many unstarted jobs match, and the form that cancels exactly those counted (no change yet)."""
    f = _bulk_filter(request.args, waiting=True)
    with get_db().connection() as conn:
        preview = bulk.preview_waiting(conn, f, scope=current_scope("jobs.cancel"), limit=BULK_LIMIT, cap=COUNT_CAP)
    return _confirm("jobs/_cancel_many_confirm.html", f=f, count=preview.count, limit=BULK_LIMIT, cap=COUNT_CAP,
                    n=preview.bound.n, token=previews.sign("cancel_many", f.key, preview.bound),
                    args=_filter_args(f, waiting=True))


@bp.route("/cancel-many", methods=["POST"])
@requires("jobs.cancel")
def cancel_many():
    """Cancel the pending or retryable jobs the confirmation counted, in the user's jobs.cancel scope."""
    f = _bulk_filter(request.form, waiting=True)
    reason, key = forms.reason(), forms.request_key()
    bound = previews.read(request.form.get(previews.FIELD), "cancel_many", f.key)
    try:
        with get_db().connection() as conn:
            bound = bound or bulk.preview_waiting(conn, f, scope=current_scope("jobs.cancel"), limit=BULK_LIMIT).bound
            result = bulk.cancel_waiting(conn, f, bound, forms.actor(), reason, key, scope=current_scope("jobs.cancel"))
            remaining = bulk.preview_waiting(conn, f, scope=current_scope("jobs.cancel"), limit=BULK_LIMIT,
                                             cap=COUNT_CAP).count
    except bulk.PreviewOutdated as exc:
        return _outdated(exc, "jobs.cancel_many_confirm", **_filter_args(f, waiting=True))
    return forms.render_result("jobs/_action_result.html", action="cancel_many", cancelled=result.done,
                               previewed=result.previewed, remaining=remaining, reason=reason, f=f)


@bp.route("/replay-many/confirm")
@requires("jobs.replay")
def replay_many_confirm():
    """How many open dead jobs match, and the form that replays exactly those counted (no change yet)."""
    f = _bulk_filter(request.args, waiting=False)
    scope = current_scope("jobs.replay")
    with get_db().connection() as conn:
        preview = bulk.preview_dead(conn, f, purge=False, scope=scope, limit=BULK_LIMIT)
        outlook = dashboard.replay_preview(conn, scope, jobqueue.DeadFilter(
            type=f.type, queue=f.queue, tenant_id=f.tenant_id, error_code=f.error_code, open_only=True),
            cap=dashboard.REPLAY_COUNT_CAP)
    return _confirm("jobs/_replay_many_confirm.html", f=f, count=int(outlook["matched"]), limit=BULK_LIMIT, outlook=outlook,
                    cap=dashboard.REPLAY_COUNT_CAP, n=preview.bound.n,
                    token=previews.sign("replay_many", f.key, preview.bound), args=_filter_args(f, waiting=False))


@bp.route("/replay-many", methods=["POST"])
@requires("jobs.replay")
def replay_many():
    """Replay the open dead jobs the confirmation counted, in the user's jobs.replay scope."""
    f = _bulk_filter(request.form, waiting=False)
    reason, key = forms.reason(), forms.request_key()
    bound = previews.read(request.form.get(previews.FIELD), "replay_many", f.key)
    try:
        with get_db().connection() as conn:
            bound = bound or bulk.preview_dead(conn, f, purge=False, scope=current_scope("jobs.replay"), limit=BULK_LIMIT).bound
            result = bulk.replay_dead(conn, f, bound, forms.actor(), reason, key, scope=current_scope("jobs.replay"))
    except bulk.PreviewOutdated as exc:
        return _outdated(exc, "jobs.replay_many_confirm", **_filter_args(f, waiting=False))
    replay = jobqueue.BulkReplay(replayed=result.replays, matched=result.previewed)
    response = make_response(forms.render_result(
        "jobs/_action_result.html", action="replay_many", replayed=replay.replayed, new_jobs=replay.jobs,
        created=replay.created, matched=replay.matched, reason=reason, f=f))
    # The dead-letter groups (and any list of dead jobs) reload: their open counts changed.
    response.headers["HX-Trigger"] = "dead-letters-changed"
    return response


@bp.route("/purge/confirm")
@requires("jobs.resolve")
def purge_confirm():
    """How many dead jobs a purge of this filter and age deletes (no change yet), the retention the
    pruner applies, and the form that deletes exactly those counted."""
    f = _bulk_filter(request.args, waiting=False)
    with get_db().connection() as conn:
        preview = bulk.preview_dead(conn, f, purge=True, scope=current_scope("jobs.resolve"), limit=BULK_LIMIT)
    return _confirm("jobs/_purge_confirm.html", f=f, count=preview.count, limit=BULK_LIMIT, n=preview.bound.n,
                    token=previews.sign("purge_dead", f.key, preview.bound), args=_filter_args(f, waiting=False),
                    retention_days=get_config().dead_retention_days)


@bp.route("/purge", methods=["POST"])
@requires("jobs.resolve")
def purge():
    """Delete the dead jobs the purge's confirmation counted, in the user's jobs.resolve scope."""
    f = _bulk_filter(request.form, waiting=False)
    reason, key = forms.reason(), forms.request_key()
    bound = previews.read(request.form.get(previews.FIELD), "purge_dead", f.key)
    try:
        with get_db().connection() as conn:
            bound = bound or bulk.preview_dead(conn, f, purge=True, scope=current_scope("jobs.resolve"), limit=BULK_LIMIT).bound
            result = bulk.purge_dead(conn, f, bound, forms.actor(), reason, key, scope=current_scope("jobs.resolve"))
    except bulk.PreviewOutdated as exc:
        return _outdated(exc, "jobs.purge_confirm", **_filter_args(f, waiting=False))
    response = make_response(forms.render_result("jobs/_bulk_result.html", action="purge", result=result,
                                                 reason=reason, f=f))
    response.headers["HX-Trigger"] = "dead-letters-changed"
    return response


# -- tick boxes: actions on the selected jobs ---------------------------------------------------

def _selection():
    """The selection's action (400 ``invalid_action``) and its job ids (400 ``invalid_selection``,
    ``nothing_selected``, ``too_many_selected``); each id visible to the user (else 404) and the
    action's permission held in each selected job's tenant (else 403, nothing done)."""
    action = (request.form.get("action") or "").strip()
    if action not in bulk.SELECTION_ACTIONS:
        raise ApiError(400, "invalid_action", _("Choose replay, cancel, discard or run now."))
    raw = request.form.getlist("ids")
    if not raw:
        raise ApiError(400, "nothing_selected", _("Tick at least one job."))
    if len(raw) > bulk.SELECTION_MAX:
        raise ApiError(400, "too_many_selected", _("Select at most %(n)s jobs.", n=bulk.SELECTION_MAX))
    try:
        ids = sorted({uuid.UUID(r.strip()) for r in raw})
    except ValueError:
        raise ApiError(400, "invalid_selection", _("A selected job id is not an id; reload the page.")) from None
    permission = bulk.SELECTION_ACTIONS[action]
    if not current_user.has(permission):
        audit_denied(permission)
        raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s.", permission=permission))
    with get_db().connection() as conn:
        jobs = bulk.selected_jobs(conn, ids, current_scope("jobs.view"))
    if len(jobs) != len(ids):
        raise ApiError(404, "not_found", _("No such job, or it belongs to a tenant you cannot see."))
    for tenant_id in sorted({j["tenant_id"] for j in jobs}, key=str):
        require_for_tenant(permission, tenant_id)
    return action, permission, jobs


@bp.route("/selected/confirm", methods=["POST"])
@requires("jobs.view")
def selected_confirm():
    """The ticked jobs, the exact count the action applies to, and the form that does it (no change yet)."""
    action, _permission, jobs = _selection()
    eligible = [j for j in jobs if bulk.applies(action, j)]
    return _confirm("jobs/_selected_confirm.html", action=action, jobs=jobs, eligible=eligible,
                    skipped=[j for j in jobs if not bulk.applies(action, j)])


@bp.route("/selected", methods=["POST"])
@requires("jobs.view")
def selected():
    """Replay, cancel, discard or run now exactly the ticked jobs the confirmation listed."""
    action, permission, jobs = _selection()
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        result = bulk.act_on_selected(conn, action, [j["id"] for j in jobs], forms.actor(), reason, key,
                                      scope=current_scope(permission))
    response = make_response(forms.render_result("jobs/_bulk_result.html", action=f"{action}_selected",
                                                 result=result, reason=reason))
    response.headers["HX-Trigger"] = "jobs-changed"
    return response


@bp.route("/<uuid:job_id>/run-now", methods=["POST"])
@requires("jobs.cancel")
def run_now(job_id):
    """Run a scheduled or retry-waiting job now (its ``available_at`` becomes now), audited."""
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        job = _job_for_action(conn, job_id, "jobs.cancel")
        result = bulk.act_on_selected(conn, "run_now", [job["id"]], forms.actor(), reason, key,
                                      scope=current_scope("jobs.cancel"))
    if not result.done:
        raise ApiError(409, "invalid_status", _("Only a scheduled job or one waiting for a retry can run now."))
    return forms.render_result("jobs/_bulk_result.html", action="run_now_selected", result=result, reason=reason,
                               job_id=job_id)
