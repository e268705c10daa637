"""Logging: JSON lines in production, readable lines in a terminal.

Context such as ``job_id``, ``tenant_id`` and ``correlation_id`` is passed with
``extra=`` and appears as fields; payloads and secrets are never logged.  The
message, every text field and the traceback go through
:func:`opsboard.redact.redact` (an idempotency key or correlation id may hold
an email address).
"""
from __future__ import annotations

import json
import logging
import sys
import time

from .redact import redact

_CONTEXT_FIELDS = ("job_id", "tenant_id", "correlation_id", "idempotency_key", "group_key", "worker_id",
                   "request_id", "queue", "job_type", "service", "count")


def _clean(value):
    """A field as logged: numbers as they are, anything else as redacted text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return redact(str(value), limit=None)


def _clean_lines(text: str) -> str:
    """A traceback, redacted line by line (redact() bounds how much it reads at once)."""
    return "\n".join(redact(line, limit=None) for line in text.splitlines())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage(), limit=None),
        }
        for key in _CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = _clean(value)
        if record.exc_info:
            doc["exc"] = _clean_lines(self.formatException(record.exc_info))
        return json.dumps(doc, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname:<7} {record.name}: "
                f"{redact(record.getMessage(), limit=None)}")
        extras = " ".join(f"{k}={_clean(getattr(record, k))}" for k in _CONTEXT_FIELDS
                          if getattr(record, k, None) is not None)
        text = f"{base} {extras}" if extras else base
        if record.exc_info:
            text += "\n" + _clean_lines(self.formatException(record.exc_info))
        return text


def configure(fmt: str = "text", level: int = logging.INFO) -> None:
    """Install one stderr handler on the root logger (idempotent)."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for old in list(root.handlers):
        if getattr(old, "_opsboard", False):
            root.removeHandler(old)
    handler._opsboard = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("psycopg.pool").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
