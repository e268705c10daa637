"""Workflow pages (issue 45): the list with filters, and a workflow's page with its DAG drawn as
server-side SVG (each node's state and duration, the critical path), cancel (audited, a reason), and
a replay form for each dead task (the job's own audited replay, which resumes the workflow).

Registered through the catalogue (``opsboard.jobqueue.workflows.register``), like an extension's page.
"""
from __future__ import annotations

from collections import defaultdict

from flask import Blueprint, abort, render_template, request
from markupsafe import Markup, escape

from ..auth import TenantScope
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from ..jobqueue import workflows
from . import forms
from .context import get_db
from .errors import ApiError
from .security import current_scope, require_for_tenant, requires

bp = Blueprint("workflows", __name__, url_prefix="/workflows")
bp.context_processor(forms.form_globals)

#: Tasks at most for which the page draws the graph (a 10,000-task fan-out is a table, not a picture).
GRAPH_MAX_TASKS = 300
STATES = ("running", "succeeded", "failed", "cancelled")
#: The words the pages show through ``_(value)``: workflow and task states, and kinds (marked for extraction).
_WORDS = (_l("running"), _l("succeeded"), _l("failed"), _l("cancelled"), _l("waiting"), _l("ready"), _l("dead"),
          _l("skipped"), _l("workflow"), _l("batch"))
#: Node colours by task state (the page's legend shows the same).
COLOURS = {"waiting": "#d0d4da", "ready": "#7fb3e6", "succeeded": "#6cc28a", "dead": "#e06c6c",
           "cancelled": "#b0a08a", "skipped": "#eeeeee"}


def _scope() -> TenantScope:
    return current_scope("jobs.view")


@bp.get("/")
@requires("jobs.view")
def index():
    state = request.args.get("state") or None
    if state not in (None, *STATES):
        abort(400)
    kind = request.args.get("kind") or None
    if kind not in (None, "workflow", "batch"):
        abort(400)
    tenant = request.args.get("tenant") or None
    tenant_id = workflows._uuid(tenant) if tenant else None
    if tenant and tenant_id is None:
        abort(400)
    with get_db().connection() as conn:
        rows = workflows.list_workflows(conn, _scope(), state=state, tenant_id=tenant_id, kind=kind, limit=100)
    return render_template("workflows/index.html", rows=rows, state=state, kind=kind, tenant=tenant,
                           states=STATES)


def task_durations(tasks: list[dict]) -> dict:
    """Each task's run time in seconds (its job's start to finish; 0 for one that did not run)."""
    out = {}
    for t in tasks:
        start, end = t.get("started_at"), t.get("job_finished_at")
        out[t["id"]] = (end - start).total_seconds() if start and end else 0.0
    return out


def critical_path(tasks: list[dict]) -> list:
    """The chain of tasks with the largest total run time, first to last (task ids)."""
    by_id = {t["id"]: t for t in tasks}
    dur = task_durations(tasks)
    best: dict = {}
    prev: dict = {}

    def total(tid):
        if tid in best:
            return best[tid]
        # Iterative enough for the pages' size (GRAPH_MAX_TASKS): deps inside this workflow only.
        deps = [d for d in by_id[tid]["deps"] if d in by_id]
        back = max(deps, key=total, default=None)
        best[tid] = dur[tid] + (best[back] if back is not None else 0.0)
        prev[tid] = back
        return best[tid]

    if not tasks:
        return []
    end = max(by_id, key=total)
    path = []
    while end is not None:
        path.append(end)
        end = prev[end]
    return list(reversed(path))


def dag_svg(tasks: list[dict]) -> Markup:
    """The workflow's DAG as SVG: one column per depth, a box per task coloured by its state with its
    name and duration, arrows from each dependency, the critical path drawn thicker."""
    by_id = {t["id"]: t for t in tasks}
    depth: dict = {}

    def level(tid):
        if tid not in depth:
            depth[tid] = 0  # guards a malformed loop; the builder refuses cycles
            deps = [d for d in by_id[tid]["deps"] if d in by_id]
            depth[tid] = 1 + max((level(d) for d in deps), default=-1)
        return depth[tid]

    columns: dict[int, list] = defaultdict(list)
    for t in tasks:
        columns[level(t["id"])].append(t["id"])
    w, h, gx, gy = 150, 38, 60, 14
    pos = {}
    for col, ids in columns.items():
        for row, tid in enumerate(ids):
            pos[tid] = (10 + col * (w + gx), 10 + row * (h + gy))
    width = 20 + (max(columns, default=0) + 1) * (w + gx)
    height = 20 + max((len(v) for v in columns.values()), default=1) * (h + gy)
    crit = critical_path(tasks)
    crit_edges = set(zip(crit, crit[1:]))
    dur = task_durations(tasks)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" direction="ltr"><title>{escape(_("Workflow"))}</title>',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
    for t in tasks:
        x2, y2 = pos[t["id"]]
        for d in t["deps"]:
            if d not in pos:
                continue
            x1, y1 = pos[d]
            thick = (d, t["id"]) in crit_edges
            parts.append(f'<line x1="{x1 + w}" y1="{y1 + h / 2}" x2="{x2}" y2="{y2 + h / 2}" '
                         f'stroke="{"#c0392b" if thick else "#888"}" stroke-width="{3 if thick else 1}" '
                         f'marker-end="url(#arrow)"/>')
    for t in tasks:
        x, y = pos[t["id"]]
        on_path = t["id"] in crit
        label = t["name"] if len(t["name"]) <= 18 else t["name"][:17] + "…"
        secs = dur[t["id"]]
        parts.append(
            f'<g class="node" data-task="{escape(t["name"])}" data-state="{escape(t["state"])}"'
            f'{" data-critical" if on_path else ""}>'
            f'<title>{escape(t["name"])}: {escape(_(t["state"]))}</title>'
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{COLOURS.get(t["state"], "#fff")}" '
            f'stroke="{"#c0392b" if on_path else "#555"}" stroke-width="{3 if on_path else 1}"/>'
            f'<text x="{x + 8}" y="{y + 16}" font-size="12">{escape(label)}</text>'
            f'<text x="{x + 8}" y="{y + 31}" font-size="11" fill="#333">{escape(_(t["state"]))}'
            f'{f" · {secs:.2f} s" if secs else ""}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _load(conn, workflow_id):
    wf = workflows.get_workflow(conn, workflow_id, _scope())
    if wf is None:
        abort(404)
    dur = task_durations(wf["tasks"])
    for t in wf["tasks"]:
        t["duration"] = dur[t["id"]]
    return wf


@bp.get("/<uuid:workflow_id>")
@requires("jobs.view")
def detail(workflow_id):
    with get_db().connection() as conn:
        wf = _load(conn, workflow_id)
    small = len(wf["tasks"]) <= GRAPH_MAX_TASKS
    return render_template("workflows/detail.html", wf=wf, graph=dag_svg(wf["tasks"]) if small else None,
                           critical=set(critical_path(wf["tasks"])) if small else set(),
                           graph_max=GRAPH_MAX_TASKS)


@bp.post("/<uuid:workflow_id>/cancel")
@requires("jobs.cancel")
def cancel(workflow_id):
    reason, key = forms.reason(), forms.request_key()
    with get_db().connection() as conn:
        wf = workflows.get_workflow(conn, workflow_id, _scope(), task_limit=1)
        if wf is None:
            raise ApiError(404, "not_found", _("No such workflow, or it belongs to a tenant you cannot see."))
        require_for_tenant("jobs.cancel", wf["tenant_id"])
        result = workflows.cancel(conn, workflow_id, forms.actor(), reason, key, scope=current_scope("jobs.cancel"))
    return forms.render_result("workflows/_cancel_result.html", result=result, reason=reason)
