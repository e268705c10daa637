"""Workers: the live worker processes, what they run, and which went silent."""
from __future__ import annotations

from flask import Blueprint, render_template

from .. import dashboard
from .app import get_db
from .security import current_scope, requires

bp = Blueprint("workers", __name__, url_prefix="/workers")


def _context() -> dict:
    with get_db().connection() as conn:
        workers = dashboard.list_workers(conn, current_scope("workers.view"))
    return {"workers": workers, "stale_seconds": dashboard.WORKER_STALE_SECONDS,
            "stale_count": sum(1 for w in workers if w["stale"])}


@bp.route("/")
@requires("workers.view")
def index():
    return render_template("workers/index.html", **_context())


@bp.route("/_list")
@requires("workers.view")
def worker_list():
    return render_template("workers/_list.html", **_context())
