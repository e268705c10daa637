"""Deliveries: circuit breakers of providers and webhook endpoints, and the endpoints' health."""
from __future__ import annotations

from flask import Blueprint, render_template

from ..deliveries import breaker, endpoint_health
from .context import get_db
from .security import current_scope, requires

bp = Blueprint("deliveries", __name__, url_prefix="/deliveries")


def _context() -> dict:
    scope = current_scope("jobs.view")
    with get_db().connection() as conn:
        status = breaker.delivery_status(conn, scope)
        # Each endpoint's last error, failure rate and dead count beside its breaker (issue 44).
        status["health"] = endpoint_health.endpoint_summaries(conn, status["endpoints"])
        return status


@bp.route("/")
@requires("jobs.view")
def index():
    from .. import pauses
    from .pauses import holds_context
    from ..notifications import tracking
    with get_db().connection() as conn:
        holds = holds_context(conn)   # incident controls: providers held by hand (issue 28)
        # The latest notification deliveries and the state each reached (issue 26; all of them: /notifications/).
        latest = tracking.recent(conn, current_scope("jobs.view"), limit=20)
    return render_template("deliveries/index.html", **_context(), **holds, providers=pauses.known_providers(),
                           latest=latest)


@bp.route("/_breakers")
@requires("jobs.view")
def breakers():
    return render_template("deliveries/_breakers.html", **_context())
