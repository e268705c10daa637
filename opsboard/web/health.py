"""Liveness and readiness probes."""
from __future__ import annotations

from flask import Blueprint, jsonify

from .. import migrate
from ..db import DatabaseUnavailable, connect
from .context import get_db

bp = Blueprint("health", __name__)


@bp.route("/healthz")
def healthz():
    """The process is alive: no database call."""
    return jsonify(status="ok")


@bp.route("/readyz")
def readyz():
    """Ready when the database answers and every migration on disk is applied unchanged."""
    try:
        with get_db().pool.connection(timeout=2) as conn:
            state = migrate.status(conn)
    except migrate.MigrationError as exc:  # the files on disk are wrong, not the database
        return jsonify(status="unavailable", error="migrations_invalid", detail=str(exc)), 503
    except (DatabaseUnavailable, Exception) as exc:  # pool timeout, connection refused...
        return jsonify(status="unavailable", error="database_unreachable", detail=type(exc).__name__), 503
    if not state.current:
        return jsonify(status="unavailable", error="migrations_pending",
                       pending=[m.path.name for m in state.pending],
                       changed=[m.path.name for m in state.changed]), 503
    return jsonify(status="ready", schema_version=max(state.applied, default=0))
