"""How one webhook endpoint's deliveries fare (issue 44): its last error, its recent
failure rate and its dead deliveries, for the endpoint's page.

An endpoint is named only in its deliveries' payload (``webhook.deliver`` jobs:
``{"endpoint_id": ...}``); migration 0083 indexes that name, so each figure reads
one endpoint's rows, never the tenant's.  The failure rate counts the attempts of
the endpoint's newest :data:`WINDOW` deliveries finished in the last
:data:`RATE_HOURS` hours: bounded work however busy the endpoint is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from .. import db

#: Deliveries read (newest first) for the failure rate and the last error.
WINDOW = 2000
#: The failure rate's period.
RATE_HOURS = 24
#: Dead deliveries listed on the page (the count covers all of them).
DEAD_LISTED = 50


@dataclass
class EndpointHealth:
    """What the endpoint's page shows beside the endpoint itself."""

    calls: int = 0
    failures: int = 0
    deliveries_read: int = 0
    last_error: dict | None = None
    dead_count: int = 0
    dead: list[dict] = field(default_factory=list)
    window: int = WINDOW
    hours: int = RATE_HOURS

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts over all attempts that reached the endpoint (``None``: none in the period)."""
        return self.failures / self.calls if self.calls else None


def endpoint_health(conn: psycopg.Connection, tenant_id, endpoint_id, *, now: datetime | None = None,
                    window: int = WINDOW, hours: int = RATE_HOURS, dead_listed: int = DEAD_LISTED) -> EndpointHealth:
    """The health of endpoint ``endpoint_id`` of tenant ``tenant_id``.

    The caller has checked that the endpoint is in the viewer's scope (the tenant comes from the
    endpoint's own row).  ``now`` defaults to the database's clock."""
    if now is None:
        now = conn.execute("SELECT now() AS now").fetchone()["now"]
    key = {"tenant_id": tenant_id, "endpoint_id": str(endpoint_id)}
    rate = db.one(conn, "webhook_endpoint_health", {**key, "window": window, "since": now - timedelta(hours=hours)})
    last = db.one(conn, "webhook_endpoint_last_error", {**key, "window": window})
    dead_count = db.one(conn, "webhook_endpoint_dead_count", key)["n"]
    dead = db.all_rows(conn, "webhook_endpoint_dead_list", {**key, "limit": dead_listed}) if dead_count else []
    return EndpointHealth(calls=rate["calls"], failures=rate["failures"], deliveries_read=rate["deliveries_read"],
                          last_error=last, dead_count=dead_count, dead=dead, window=window, hours=hours)


#: Deliveries read per endpoint for a list's brief figures (a list refreshes itself: smaller than a page's).
LIST_WINDOW = 200
#: Dead deliveries counted per endpoint on a list; more shows as "at least".
LIST_DEAD_CAP = 10000


@dataclass
class EndpointSummary:
    """One endpoint's figures on the Webhooks list and the Deliveries table."""

    calls: int = 0
    failures: int = 0
    last_error: str | None = None
    last_error_detail: str | None = None
    last_error_at: datetime | None = None
    last_error_job_id: object = None
    dead_count: int = 0
    dead_capped: bool = False

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.calls if self.calls else None


def endpoint_summaries(conn: psycopg.Connection, endpoints: list[dict], *, now: datetime | None = None,
                       window: int = LIST_WINDOW, hours: int = RATE_HOURS,
                       dead_cap: int = LIST_DEAD_CAP) -> dict[str, EndpointSummary]:
    """Brief health of each endpoint of ``endpoints`` (rows of ``list_endpoints``: ``id`` and ``tenant_id``,
    already in the viewer's scope), by the endpoint's id as text: one statement for the list."""
    if not endpoints:
        return {}
    if now is None:
        now = conn.execute("SELECT now() AS now").fetchone()["now"]
    rows = db.all_rows(conn, "webhook_endpoint_summaries", {
        "tenant_ids": [e["tenant_id"] for e in endpoints], "endpoint_ids": [str(e["id"]) for e in endpoints],
        "window": window, "since": now - timedelta(hours=hours), "dead_cap": dead_cap})
    return {r["endpoint_id"]: EndpointSummary(
        calls=r["calls"], failures=r["failures"], last_error=r["last_error"],
        last_error_detail=r["last_error_detail"], last_error_at=r["last_error_at"],
        last_error_job_id=r["last_error_job_id"], dead_count=r["dead_count"],
        dead_capped=r["dead_count"] >= dead_cap) for r in rows}


#: An endpoint's latency is read from its newest this many attempts that reached it.
LATENCY_WINDOW = 200


@dataclass
class EndpointFlight:
    """An endpoint's deliveries in flight and how long it takes to answer (issue 50)."""

    running: int
    #: All webhook deliveries in flight that the reader may see (the endpoint's share of them).
    type_running: int
    #: The running deliveries per endpoint at most (the live limit, else the catalogue's).
    limit: int | None
    live_limit: bool
    #: Milliseconds, over the newest LATENCY_WINDOW attempts that reached it (None: none yet).
    p50_ms: float | None
    p95_ms: float | None
    attempts: int
    #: Slowed down (it answered slowly, migration 0093): its lower limit and until when (else None).
    slowed_limit: int | None = None
    slowed_until: datetime | None = None

    @property
    def share(self) -> float | None:
        return self.running / self.type_running if self.type_running else None


def endpoint_flight(conn: psycopg.Connection, tenant_id, endpoint_id, *,
                    window: int = LATENCY_WINDOW) -> EndpointFlight:
    """Endpoint ``endpoint_id``'s deliveries in flight (its concurrency key's running jobs), its share of
    every delivery in flight, its limit per endpoint, and its answer time p50/p95 (milliseconds)."""
    from .. import pauses
    from . import webhook_endpoint_key

    key = webhook_endpoint_key({"endpoint_id": str(endpoint_id)}, tenant_id)
    flight = db.one(conn, "job_key_in_flight", {"key": key, "type": "webhook.deliver"})
    live = pauses.list_limits(conn).get(("key", "webhook.deliver"))
    limit = live["value"] if live else pauses.catalogue_limit("key", "webhook.deliver")
    lat = db.one(conn, "webhook_endpoint_latency", {"tenant_id": tenant_id, "endpoint_id": str(endpoint_id),
                                                    "window": window})
    slowed = db.one(conn, "job_key_limit_get", {"key": key, "now": None})
    return EndpointFlight(running=flight["running"], type_running=flight["type_running"], limit=limit,
                          live_limit=live is not None, p50_ms=lat["p50"], p95_ms=lat["p95"], attempts=lat["n"],
                          slowed_limit=slowed["max_running"] if slowed else None,
                          slowed_until=slowed["until"] if slowed else None)
