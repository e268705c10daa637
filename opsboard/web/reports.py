"""Reports: request a report, watch runs progress (htmx partial), download a
ready CSV (tenant-checked), see a failed run's dead job, and the schedules."""
from __future__ import annotations

from flask import Blueprint, Response, abort, make_response, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import dashboard, reports, schedules, storage
from . import forms
from .context import get_config, get_db
from .errors import ApiError, human_message
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("reports", __name__, url_prefix="/reports")
bp.context_processor(forms.form_globals)

_CORE_STATUS = {"not_found": 404, "request_key_reused": 409}


def _runs_context() -> dict:
    with get_db().connection() as conn:
        runs = reports.list_runs(conn, current_scope("reports.view"), tenant_id=forms.arg_uuid("tenant_id"))
    return {"runs": runs, "active": any(r["status"] in ("queued", "running") for r in runs)}


@bp.app_template_global()
def report_title(name: str) -> str:
    """A report kind's title in the reader's language (the kind's name when it is no longer declared)."""
    try:
        return _(reports.get_kind(name).title)
    except reports.ReportError:
        return name


@bp.route("/")
@requires("reports.view")
def index():
    with get_db().connection() as conn:
        tenants = dashboard.tenant_options(conn, current_scope("reports.request"))
    return render_template("reports/index.html", kinds=reports.all_kinds(), tenants=tenants, **_runs_context())


@bp.route("/_runs")
@requires("reports.view")
def runs():
    return render_template("reports/_runs.html", **_runs_context())


#: Refusals that belong to one field of the request form: the field whose error slot shows them.
_FIELD_OF = {"invalid_time_zone": "time_zone", "tenant_required": "tenant_id", "unknown_report_kind": "kind"}


def _field_error(exc: ApiError, field: str | None):
    """For htmx, a refusal goes next to its field (``#report-error-<field>``), or above the button; the runs
    list and its polling are left alone, and the form keeps working (issue 23)."""
    if not request.headers.get("HX-Request"):
        raise exc
    response = make_response(render_template("_error.html", status=exc.status, code=exc.code, message=exc.message),
                             exc.status)
    response.headers["HX-Retarget"] = f"#report-error-{field}" if field else "#report-form-result"
    response.headers["HX-Reswap"] = "innerHTML"
    return response


@bp.route("/", methods=["POST"])
@requires("reports.request")
def request_report():
    tenant_id = forms.arg_uuid("tenant_id", request.form)
    if tenant_id is None:
        return _field_error(ApiError(400, "tenant_required", _("Choose the tenant the report is about.")), "tenant_id")
    require_for_tenant("reports.request", tenant_id)
    kind_name = forms.arg_text("kind", request.form, 100) or ""
    try:
        kind = reports.get_kind(kind_name)
        params = {p.name: forms.arg_day(p.name, request.form) if p.type == "date"
                  else forms.arg_text(p.name, request.form, 100) for p in kind.params}
        params = {k: v for k, v in params.items() if v is not None}
        with get_db().connection() as conn:
            run = reports.request_report(conn, tenant_id, kind.name, params, forms.actor(),
                                         request_key=forms.request_key())
    except reports.ReportError as exc:
        field = _FIELD_OF.get(exc.code) or (exc.params.get("field") if exc.code == "invalid_date" else None)
        if exc.code == "invalid_date" and field is None:
            field = "date_to"
        return _field_error(ApiError(_CORE_STATUS.get(exc.code, 400), exc.code, human_message(exc)), field)
    if request.headers.get("HX-Request"):
        # The runs list (with the new run) replaces itself; the form gets a fresh request key (the one
        # sent is spent: sending it again would return this run) and loses the errors it showed.
        response = make_response(render_template("reports/_runs.html", **_runs_context())
                                 + render_template("reports/_form_reset.html"))
        response.headers["HX-Retarget"] = "#report-runs"
        response.headers["HX-Reswap"] = "outerHTML"
        return response
    return redirect(url_for("reports.detail", run_id=run["id"]), 303)


def _run_or_404(conn, run_id) -> dict:
    run = reports.get_run(conn, run_id, current_scope("reports.view"))
    if run is None:
        abort(404, _("No such report, or it is not yours to see."))
    return run


@bp.route("/<uuid:run_id>")
@requires("reports.view")
def detail(run_id):
    with get_db().connection() as conn:
        run = _run_or_404(conn, run_id)
        chunk_rows = reports.chunks(conn, run_id)
    run["progress"] = reports.progress(run)
    return render_template("reports/detail.html", run=run, chunks=chunk_rows,
                           kind=reports.get_kind(run["kind"]))


@bp.route("/<uuid:run_id>/download")
@requires("reports.view")
def download(run_id):
    with get_db().connection() as conn:
        run = _run_or_404(conn, run_id)
    if run["status"] != "ready":
        raise ApiError(409, "report_not_ready", _("The report is %(status)s; download it once it is ready.", status=run["status"]))
    store = storage.from_config(get_config())
    try:
        f = store.open_read(run["storage_key"])
    except storage.StorageError:
        raise ApiError(410, "report_gone", _("The report's file is no longer stored; request it again.")) from None

    def stream():
        with f:
            while block := f.read(64 * 1024):
                yield block

    response = Response(stream(), mimetype="text/csv")
    response.headers["Content-Disposition"] = f'attachment; filename="{reports.download_name(run)}"'
    if run["byte_size"] is not None:
        response.headers["Content-Length"] = str(run["byte_size"])
    return response


@bp.route("/schedules")
@requires("reports.view")
def schedule_list():
    with get_db().connection() as conn:
        rows = schedules.overview(conn, current_scope("reports.view"))
    return render_template("reports/schedules.html", schedules=rows)
