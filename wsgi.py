"""WSGI entry point: ``gunicorn wsgi:app``."""
import sys

from opsboard import create_app
from opsboard.config import ConfigError
from opsboard.db import DatabaseUnavailable

try:
    app = create_app()
except (ConfigError, DatabaseUnavailable) as exc:
    print(f"opsboard: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
