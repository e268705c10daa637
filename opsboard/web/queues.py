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


def chart_range() -> str:
    """The ``range`` argument of a chart view: ``1h`` (default) or ``24h``."""
    name = (request.args.get("range") or "1h").strip()
    if name not in metrics.CHART_RANGES:
        raise ApiError(400, "invalid_range", _("range must be one of %(names)s", names=", ".join(metrics.CHART_RANGES)))
    return name


def _charts() -> dict:
    range_name = chart_range()
    scope = current_scope("jobs.view")
    queues, types = ({}, {})
    if scope.all:  # job statistics are platform-wide: operator staff only
        with read_connection() as conn:
            queues, types = metrics.throughput_charts(conn, range_name)
    for q in ("critical", "default", "bulk"):
        if q not in queues and scope.all:
            queues[q] = None
    return {"range_name": range_name, "ranges": list(metrics.CHART_RANGES), "queue_charts": queues,
            "type_charts": dict(sorted(types.items())), "line_chart": line_chart, "staff": scope.all,
            "bucket_minutes": metrics.CHART_RANGES[range_name][1], "p95_cap": float(metrics.DURATION_BUCKETS_MS[-1])}


@bp.route("/_charts")
@requires("jobs.view")
def charts():
    return render_template("queues/_charts.html", **_charts())
