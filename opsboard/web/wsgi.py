"""WSGI entry point of an installed opsboard: ``gunicorn opsboard.web.wsgi:app``."""
import sys

from ..config import ConfigError
from ..db import DatabaseUnavailable
from .app import create_app

try:
    app = create_app()
except (ConfigError, DatabaseUnavailable) as exc:
    print(f"opsboard: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
