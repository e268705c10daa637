"""Workers: the live worker processes, what they run, and which went silent."""
from __future__ import annotations

from flask import Blueprint, render_template
from flask_babel import gettext as _

from .. import dashboard
from .context import get_db
from .errors import ApiError
from .security import current_scope, requires

bp = Blueprint("workers", __name__, url_prefix="/workers")


def _context() -> dict:
    scope = current_scope("workers.view")
    if not scope.all:
        # Worker processes are the platform's (hosts, pids, versions), not a tenant's.
        raise ApiError(403, "platform_staff_only", _("The workers page is for the platform's own staff."))
    with get_db().connection() as conn:
        workers = dashboard.list_workers(conn, scope)
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
