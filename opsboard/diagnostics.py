"""Diagnostic job types and their handlers: used by ``opsboard bench``, the demo and smoke tests."""
from __future__ import annotations

from .catalogue import Catalogue
from .jobtypes import Field, define


def noop(job) -> None:
    """Succeed at once."""
    return None


def sleep(job) -> None:
    """Sleep for payload["ms"] milliseconds (wakes early when the job is cancelled)."""
    job.cancelled.wait(float(job.payload["ms"]) / 1000.0)


def register(cat: Catalogue) -> None:
    """The diagnostic types (public: producers' smoke tests enqueue them over the API)."""
    define(cat, "diag.noop", handler=noop, max_attempts=3, timeout=10, public=True,
           description="Does nothing; measures the queue's own overhead.")
    define(cat, "diag.sleep", handler=sleep, fields={"ms": Field((int, float))}, public=True,
           max_attempts=3, timeout=60, description="Sleeps for ms milliseconds.")
    define(cat, "diag.sleep", 2, handler=sleep, queue="critical", priority=0, public=True,
           fields={"ms": Field((int, float)), "sent_at": Field((int, float), required=False)},
           max_attempts=3, timeout=10, description="Critical-queue variant, for latency measurements.")
