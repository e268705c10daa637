"""opsboard: a PostgreSQL-backed job queue, outbox, notifications and ops dashboard."""
from __future__ import annotations

__version__ = "0.1.0"


def create_app(test_config=None):
    """The Flask application (imported lazily so the core never needs Flask)."""
    from .web.app import create_app as _create_app

    return _create_app(test_config)
