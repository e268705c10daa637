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
