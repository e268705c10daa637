"""Jobs: the filterable list, a job's page and payload, and the operator
actions on jobs (replay, replay all matching, resolve/ignore, cancel).

Actions are POST + CSRF, need a reason and a request key, check the
permission for the job's own tenant, write an audit row (in the core), and
answer with a partial that htmx swaps in next to the form.
"""
from __future__ import annotations

from flask import Blueprint, abort, make_response, render_template, request, url_for
from flask_babel import gettext as _

from .. import dashboard, jobqueue, jobtypes
from ..config import QUEUE_NAMES
from ..schema import JobStatus
from . import forms
from .context import get_db, read_connection
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("jobs", __name__, url_prefix="/jobs")
bp.context_processor(forms.form_globals)

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


def _dead_filter(source) -> jobqueue.DeadFilter:
    queue_name = forms.arg_text("queue", source)
    if queue_name is not None and queue_name not in QUEUE_NAMES:
        raise ApiError(400, "invalid_filter", _("queue must be one of %(names)s", names=", ".join(QUEUE_NAMES)))
    return jobqueue.DeadFilter(type=forms.arg_text("type", source), queue=queue_name,
                            tenant_id=forms.arg_uuid("tenant_id", source),
                            error_code=forms.arg_text("error_code", source), open_only=True)


def _cancel_filter(source) -> jobqueue.CancelFilter:
    queue_name = forms.arg_text("queue", source)
    if queue_name is not None and queue_name not in QUEUE_NAMES:
        raise ApiError(400, "invalid_filter", _("queue must be one of %(names)s", names=", ".join(QUEUE_NAMES)))
    return jobqueue.CancelFilter(type=forms.arg_text("type", source), queue=queue_name,
                                 tenant_id=forms.arg_uuid("tenant_id", source),
                                 error_code=forms.arg_text("error_code", source))


@bp.route("/cancel-many/confirm")
@requires("jobs.cancel")
def cancel_many_confirm():
    """How many unstarted jobs match, and the form that cancels them (no change yet)."""
    f = _cancel_filter(request.args)
    with get_db().connection() as conn:
        n = jobqueue.count_cancellable(conn, f, scope=current_scope("jobs.cancel"), cap=COUNT_CAP + 1)
    if request.headers.get("HX-Request"):
        return render_template("jobs/_cancel_many_confirm.html", f=f, count=n, limit=BULK_LIMIT, cap=COUNT_CAP)
    return render_template("jobs/result.html", partial="jobs/_cancel_many_confirm.html", f=f, count=n,
                           limit=BULK_LIMIT, cap=COUNT_CAP)


@bp.route("/cancel-many", methods=["POST"])
@requires("jobs.cancel")
def cancel_many():
    """Cancel every pending or retryable job matching the filter, in the user's jobs.cancel scope."""
    f = _cancel_filter(request.form)
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        result = jobqueue.cancel_many(conn, f, forms.actor(), reason, key, scope=current_scope("jobs.cancel"),
                                      limit=BULK_LIMIT)
    return forms.render_result("jobs/_action_result.html", action="cancel_many", cancelled=result.cancelled,
                               remaining=result.remaining, reason=reason, f=f)


@bp.route("/replay-many/confirm")
@requires("jobs.replay")
def replay_many_confirm():
    """How many open dead jobs match, and the form that replays them (no change yet)."""
    f = _dead_filter(request.args)
    with get_db().connection() as conn:
        outlook = dashboard.replay_preview(conn, current_scope("jobs.replay"), f, cap=dashboard.REPLAY_COUNT_CAP)
    return render_template("jobs/_replay_many_confirm.html", f=f, count=int(outlook["matched"]), limit=BULK_LIMIT,
                           outlook=outlook, cap=dashboard.REPLAY_COUNT_CAP)


@bp.route("/replay-many", methods=["POST"])
@requires("jobs.replay")
def replay_many():
    """Replay every open dead job matching the filter, in the user's jobs.replay scope."""
    f = _dead_filter(request.form)
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        result = dashboard.replay_matching(conn, current_scope("jobs.replay"), f, forms.actor(), reason, key,
                                           limit=BULK_LIMIT)
    response = make_response(forms.render_result(
        "jobs/_action_result.html", action="replay_many", replayed=result.replayed, new_jobs=result.jobs,
        created=result.created, matched=result.matched, reason=reason, f=f))
    # The dead-letter groups (and any list of dead jobs) reload: their open counts changed.
    response.headers["HX-Trigger"] = "dead-letters-changed"
    return response
