"""Circuit breakers shared by every worker, stored in ``circuit_breakers``.

One breaker per webhook endpoint (``endpoint:<id>``) and per provider
(``provider:sms_gateway``, ...).  A handler asks :func:`admit` before calling;
while the breaker is open the answer is a time to come back (the handler
snoozes: no attempt is spent).  When the cool-down has passed, exactly one
caller across all workers is let through as the half-open probe; its success
closes the breaker, its failure opens it again for twice as long (up to the
cap).  :func:`record` counts outcomes: only failures that say the far side is
unwell (timeouts, resets, 408/429/5xx) count; a definite 4xx does not.

A closed breaker with no recent failure costs one primary-key read per call and
no write.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from .. import db
from ..config import ProviderSettings


@dataclass(frozen=True)
class Admission:
    allowed: bool
    #: When not allowed: the moment to try again.
    retry_at: datetime | None = None
    probe: bool = False
    state: str = "closed"


def admit(conn: psycopg.Connection, name: str, *, now: datetime | None = None, probe_lease: float = 30.0) -> Admission:
    """May a call go to ``name`` now?  Not while open; one probe at a time when half-open."""
    row = db.one(conn, "breaker_get", {"name": name})
    if row is None or row["state"] == "closed":
        return Admission(True)
    probe = db.one(conn, "breaker_take_probe", {"name": name, "now": now, "probe_lease": probe_lease})
    if probe is not None:
        return Admission(True, probe=True, state="half_open")
    current = now or db.now(conn)
    retry_at = row["open_until"] if row["state"] == "open" else row["probe_until"]
    if retry_at is None or retry_at <= current:
        retry_at = current + timedelta(seconds=1)
    return Admission(False, retry_at=retry_at, state=row["state"])


def record(conn: psycopg.Connection, name: str, ok: bool, *, code: str | None = None, tenant_id=None,
           config: ProviderSettings, now: datetime | None = None) -> dict | None:
    """Count one call's outcome; open the breaker when a threshold is crossed (``config``: the caller's
    provider settings, its thresholds and cool-downs).  Returns the row (after a failure, with ``opened``:
    whether this call opened it)."""
    cfg = config
    if ok:
        return db.one(conn, "breaker_success", {"name": name, "now": now, "window": cfg.breaker_window})
    db.execute(conn, "breaker_ensure", {"name": name, "tenant_id": tenant_id, "now": now})
    # Counting, deciding and opening are one statement (see the query): two workers
    # failing at once open the breaker once, and its cool-down doubles once.
    return db.one(conn, "breaker_failure", {
        "name": name, "code": code, "now": now, "window": cfg.breaker_window,
        "threshold": cfg.breaker_failures, "min_calls": cfg.breaker_min_calls, "rate": cfg.breaker_failure_rate,
        "cooldown": cfg.breaker_cooldown, "cooldown_max": cfg.breaker_cooldown_max})


def list_breakers(conn: psycopg.Connection, scope, limit: int = 200) -> list[dict]:
    """Provider breakers (operators) and endpoint breakers in ``scope`` (dashboard)."""
    return db.all_rows(conn, "breaker_list", {**scope.params, "limit": limit})


def delivery_status(conn: psycopg.Connection, scope) -> dict:
    """The deliveries page: provider and endpoint breakers, and endpoints with theirs, inside ``scope``."""
    from .webhooks import list_endpoints

    breakers = list_breakers(conn, scope)
    endpoints = list_endpoints(conn, scope)
    return {"breakers": breakers, "endpoints": endpoints,
            "open_count": sum(1 for b in breakers if b["state"] != "closed"),
            "disabled_count": sum(1 for e in endpoints if not e["enabled"])}
