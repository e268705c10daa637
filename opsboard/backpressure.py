"""Backpressure: shared token buckets and admission control.

* :func:`take_token` takes one token from a bucket stored in PostgreSQL
  (``rate_limits``), shared by every worker and web process, in one atomic
  statement.  Workers use it for provider rate limits: a job that finds no
  token is snoozed until the next one, without counting an attempt.
* :func:`admission` answers whether the API should accept an enqueue now:
  ``429`` when the tenant is over its enqueue rate, ``503`` when the queue's
  backlog is over its high-water mark (``critical`` has its own, higher mark),
  each with a ``Retry-After``.  Depth comes from the leader's periodic sample
  (``queue_depth``), so admission costs one statement (``admission_take``),
  never a count over the backlog.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import psycopg

from . import db

#: Waiting jobs (pending + retryable) above which a queue refuses new work.
DEFAULT_HIGH_WATER = {"critical": 200_000, "default": 1_000_000, "bulk": 2_000_000}
DEFAULT_TENANT_RATE = 200.0   # enqueues per second per tenant, sustained
DEFAULT_TENANT_BURST = 2000


@dataclass(frozen=True)
class Token:
    granted: bool
    wait_seconds: float


def take_token(conn: psycopg.Connection, name: str, rate_per_second: float, burst: int,
               now: datetime | None = None, floor: float = 0.0) -> Token:
    """Take one token from bucket ``name`` (capacity ``burst``, refilled at ``rate_per_second``), only
    while at least ``floor`` tokens stay in it (a reserve kept for takers without a floor)."""
    row = db.one(conn, "rate_limit_take", {"name": name, "capacity": float(max(1, burst)),
                                           "rate": float(rate_per_second), "now": now, "floor": float(floor)})
    return Token(bool(row["granted"]), max(0.0, float(row["wait_seconds"])))


@dataclass(frozen=True)
class Admission:
    """``status`` is 200 (accept), 429 or 503; ``retry_after`` in whole seconds."""

    status: int
    code: str = "accepted"
    retry_after: int = 0
    message: str = ""
    #: The database clock admission used (the transaction's ``now()``), when decided in one statement.
    at: datetime | None = None

    @property
    def accepted(self) -> bool:
        return self.status == 200

    def headers(self) -> dict:
        return {"Retry-After": str(self.retry_after)} if self.retry_after else {}


def admission(conn: psycopg.Connection, tenant_id, queue: str, *,
              high_water: dict[str, int] | None = None, tenant_rate: float = DEFAULT_TENANT_RATE,
              tenant_burst: int = DEFAULT_TENANT_BURST, count: int = 1, now: datetime | None = None) -> Admission:
    """May ``tenant_id`` enqueue ``count`` job(s) into ``queue`` now?

    The queue's depth is checked first (503 protects everyone), then the
    tenant's rate (429 protects the other tenants).  The tenant's token is only
    taken when the queue has room.
    """
    marks = {**DEFAULT_HIGH_WATER, **(high_water or {})}
    mark = marks.get(queue)
    if count == 1:
        # The common case in one statement (depth, the tenant's limits, the token): one round trip.
        row = db.one(conn, "admission_take", admission_params(tenant_id, queue, high_water=high_water,
                                                              tenant_rate=tenant_rate, tenant_burst=tenant_burst,
                                                              now=now))
        return admission_verdict(row, queue, mark)
    if mark is not None:
        depth = {r["queue"]: r["waiting"] for r in db.all_rows(conn, "queue_depth_ready_by_queue")}
        waiting = int(depth.get(queue, 0))
        if waiting + count > mark:
            return Admission(503, "queue_full", 30,
                             f"the {queue} queue holds {waiting} waiting jobs (limit {mark}); try again later")
    limits = db.one(conn, "tenant_enqueue_limits", {"tenant_id": tenant_id}) or {}
    rate = limits.get("enqueue_rate") or tenant_rate
    burst = limits.get("enqueue_burst") or tenant_burst
    token = None
    for _ in range(max(1, count)):
        token = take_token(conn, f"enqueue:{tenant_id}", rate, burst, now)
        if not token.granted:
            return Admission(429, "tenant_rate_limited", max(1, math.ceil(token.wait_seconds)),
                             f"this tenant may enqueue {rate:g} jobs per second (burst {burst}); slow down")
    return Admission(200)


def admission_params(tenant_id, queue: str, *, high_water: dict[str, int] | None = None,
                     tenant_rate: float = DEFAULT_TENANT_RATE, tenant_burst: int = DEFAULT_TENANT_BURST,
                     now: datetime | None = None) -> dict:
    """The parameters of the one-statement admission (``admission_take``, and statements built on it)."""
    mark = {**DEFAULT_HIGH_WATER, **(high_water or {})}.get(queue)
    return {"queue": queue, "mark": mark, "tenant_id": tenant_id, "default_rate": float(tenant_rate),
            "default_burst": int(tenant_burst), "name": f"enqueue:{tenant_id}", "now": now}


def admission_verdict(row: dict, queue: str, mark: int | None) -> Admission:
    """The :class:`Admission` a one-statement admission row stands for (``granted`` NULL: queue full)."""
    if row["granted"] is None:
        return Admission(503, "queue_full", 30, f"the {queue} queue holds {int(row['waiting'])} waiting jobs "
                                                f"(limit {mark}); try again later")
    if not row["granted"]:
        return Admission(429, "tenant_rate_limited", max(1, math.ceil(max(0.0, float(row["wait_seconds"])))),
                         f"this tenant may enqueue {float(row['rate']):g} jobs per second "
                         f"(burst {int(row['burst'])}); slow down")
    return Admission(200, at=row["now"])
