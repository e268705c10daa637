"""Diagnostic handlers for `opsboard bench`, the demo and smoke tests."""
from __future__ import annotations

import time


def noop(job) -> None:
    """Succeed at once."""
    return None


def sleep(job) -> None:
    """Sleep for payload["ms"] milliseconds (wakes early when the job is cancelled)."""
    job.cancelled.wait(float(job.payload["ms"]) / 1000.0)
