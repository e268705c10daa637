"""Queue health, the ops home page: depth, age, throughput, failures per queue and type."""
from __future__ import annotations

from flask import Blueprint, render_template, request
from flask_babel import gettext as _

from .. import dashboard, metrics
from .context import get_db, get_reads, read_connection
from .charts import line_chart, sparkline
from .errors import ApiError
from .pauses import holds_context
from .security import current_scope, requires

bp = Blueprint("queues", __name__, url_prefix="/queues")


def _context() -> dict:
    with read_connection() as conn:
        health = metrics.queue_health(conn, current_scope("jobs.view"))
        top_codes = dashboard.top_error_codes(conn, current_scope("jobs.view"))
        outbox = metrics.outbox_backlog(conn, current_scope("jobs.view"))
        # The export to NATS JetStream is the platform's, not a tenant's: operator staff only.
        event_export = metrics.event_export_lag(conn) if current_scope("jobs.view").all else []
    with get_db().connection() as conn:  # holds: the primary's (listing them resumes the expired ones)
        holds = holds_context(conn)
    # The replica's state is the platform's, not a tenant's: operator staff only.
    replica = get_reads().status() if current_scope("jobs.view").all else None
    return {**holds, "replica": replica, "health": health, "sparkline": sparkline, "inf": float("inf"), "top_codes": top_codes, "outbox": outbox,
            "event_export": event_export}


@bp.route("/")
@requires("jobs.view")
def index():
    return render_template("queues/index.html", **_context(), **_charts())


@bp.route("/_health")
@requires("jobs.view")
def health():
    return render_template("queues/_health.html", **_context())


def chart_range(ranges: dict | None = None) -> str:
    """The ``range`` argument of a chart view: ``1h`` (default), ``24h``, or ``7d`` where ``ranges`` has it
    (a tenant's page: :data:`metrics.CHART_RANGES`; the queue and job type pages: the history's)."""
    ranges = metrics.CHART_RANGES if ranges is None else ranges
    name = (request.args.get("range") or "1h").strip()
    if name not in ranges:
        raise ApiError(400, "invalid_range", _("range must be one of %(names)s", names=", ".join(ranges)))
    return name


def _charts(queue: str | None = None, job_type: str | None = None) -> dict:
    """The charts of every queue and type (the queue page), or of one ``queue`` and ``job_type`` (its page):
    the hour from job_stats, 24 hours and 7 days from the history rollup (opsboard.history)."""
    range_name = chart_range(metrics.HISTORY_RANGES)
    scope = current_scope("jobs.view")
    queues, types = ({}, {})
    if scope.all:  # job statistics are platform-wide: operator staff only
        with read_connection() as conn:
            queues, types = metrics.throughput_charts(conn, range_name, queue=queue, job_type=job_type)
    if queue is None:
        for q in ("critical", "default", "bulk"):
            if q not in queues and scope.all:
                queues[q] = None
    return {"range_name": range_name, "ranges": list(metrics.HISTORY_RANGES), "queue_charts": queues,
            "type_charts": dict(sorted(types.items())), "line_chart": line_chart, "staff": scope.all,
            "bucket_minutes": metrics.HISTORY_RANGES[range_name][1]}


@bp.route("/_charts")
@requires("jobs.view")
def charts():
    return render_template("queues/_charts.html", **_charts())


@bp.route("/<queue>/types/<path:job_type>")
@requires("jobs.view")
def type_page(queue: str, job_type: str):
    """One job type's history: processed, failed, p95 handler time and waiting jobs over 1 h, 24 h or 7 d."""
    context = _charts(queue, job_type)
    return render_template("queues/type.html", queue=queue, job_type=job_type,
                           chart=context["type_charts"].get((queue, job_type)), **context)
