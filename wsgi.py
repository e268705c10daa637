"""WSGI entry point from a checkout: ``gunicorn wsgi:app`` (same as ``opsboard.web.wsgi:app``)."""
from opsboard.web.wsgi import app  # noqa: F401
