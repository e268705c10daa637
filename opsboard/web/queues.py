"""Queue health, the ops home page: depth, age, throughput, failures per queue and type."""
from __future__ import annotations

from flask import Blueprint, render_template

from .. import metrics
from .context import get_db
from .charts import sparkline
from .security import current_scope, requires

bp = Blueprint("queues", __name__, url_prefix="/queues")


def _context() -> dict:
    with get_db().connection() as conn:
        health = metrics.queue_health(conn, current_scope("jobs.view"))
    return {"health": health, "sparkline": sparkline, "inf": float("inf")}


@bp.route("/")
@requires("jobs.view")
def index():
    return render_template("queues/index.html", **_context())


@bp.route("/_health")
@requires("jobs.view")
def health():
    return render_template("queues/_health.html", **_context())
