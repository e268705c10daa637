"""Logging: JSON lines in production, readable lines in a terminal.

Context such as ``job_id``, ``tenant_id`` and ``correlation_id`` is passed with
``extra=`` and appears as fields; payloads and secrets are never logged.
"""
from __future__ import annotations

import json
import logging
import sys
import time

_CONTEXT_FIELDS = ("job_id", "tenant_id", "correlation_id", "worker_id", "request_id", "queue", "job_type",
                   "service", "count")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = str(value) if not isinstance(value, (int, float)) else value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname:<7} {record.name}: {record.getMessage()}"
        extras = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT_FIELDS if getattr(record, k, None) is not None)
        text = f"{base} {extras}" if extras else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
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
