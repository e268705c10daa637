"""opsboard: a PostgreSQL-backed job queue, outbox, notifications and ops dashboard.

The core package imports neither Flask nor the worker: the web app is
``opsboard.web.app.create_app`` (``opsboard.web.wsgi:app`` for gunicorn).
"""
from __future__ import annotations

__version__ = "0.1.0"
