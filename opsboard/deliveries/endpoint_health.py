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
