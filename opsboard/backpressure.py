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
import threading
import time
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


#: A web process leases at most this long's worth of a tenant's enqueue rate ahead, for this long ...
LEASE_SECONDS = 0.1
#: ... and at most this many tokens at a time.
LEASE_MOST = 64


@dataclass
class _Lease:
    tokens: int
    until: float
    want: int


class TokenLeases:
    """Tokens of tenants' enqueue buckets taken ahead by this process (POST /api/v1/events).

    A request that finds a token here is admitted without a statement of its own; the first request
    without one asks the database for up to a lease's worth (``outbox_event_admit`` with ``want``:
    ``LEASE_SECONDS`` of the tenant's rate, at most ``LEASE_MOST`` and its burst) and gives back
    what the previous lease left unspent (``back``).  What stays true: the bucket in PostgreSQL grants
    every token (never more than its capacity + rate x elapsed, shared by every process and host), a
    refused request is 429/503 with ``Retry-After`` as before, and a tenant slower than
    ``1 / LEASE_SECONDS`` requests a second leases one token at a time (each request asks, as before).
    What changes for a fast tenant: a token is spent up to ``LEASE_SECONDS`` after the bucket granted
    it, and the queue's high-water mark is checked once a lease (its depth is a sample anyway).  A
    process that exits forgets its unspent tokens (the bucket refills).

    Why: the bench's one tenant took its token in a statement of its own before each event, and the
    bucket row's lock made those statements wait on each other (`opsboard bench --scenario api_worker`;
    docs/performance.md, API).
    """

    def __init__(self, seconds: float = LEASE_SECONDS, most: int = LEASE_MOST, clock=time.monotonic):
        self.seconds, self.most, self._clock = seconds, most, clock
        self._lock = threading.Lock()
        self._held: dict[str, _Lease] = {}

    def spend(self, bucket: str) -> bool:
        """Spend one token of this process's lease of ``bucket``; False when it holds none still valid."""
        with self._lock:
            lease = self._held.get(bucket)
            if lease is None or lease.tokens <= 0 or lease.until <= self._clock():
                return False
            lease.tokens -= 1
            return True

    def ask(self, bucket: str) -> tuple[int, int]:
        """``(want, back)`` for the next take from ``bucket``: how many tokens to ask for, and the unspent
        ones of an expired lease, given back by that take (and forgotten here)."""
        with self._lock:
            lease = self._held.get(bucket)
            if lease is None:
                return 1, 0
            if lease.until > self._clock():
                return lease.want, 0  # a valid lease, emptied by concurrent requests: more, nothing back
            del self._held[bucket]
            return lease.want, max(0, lease.tokens)

    def keep(self, bucket: str, granted: int, rate: float, burst: int) -> None:
        """A take granted ``granted`` tokens (the caller spends one): keep the others for ``seconds``, and
        remember how many to ask for next time (``seconds`` of ``rate``, at most ``most`` and ``burst``)."""
        want = max(1, min(self.most, int(burst), int(float(rate) * self.seconds)))
        now = self._clock()
        with self._lock:
            lease = self._held.get(bucket)
            if lease is not None and lease.until > now:
                lease.tokens += max(0, granted - 1)   # two requests leased at once: both leases kept
                lease.want = want
            elif want > 1 or granted > 1:
                if len(self._held) >= 10_000:
                    self._held = {k: v for k, v in self._held.items() if v.until > now}
                self._held[bucket] = _Lease(max(0, granted - 1), now + self.seconds, want)

    def give_back(self, bucket: str) -> bool:
        """A spent token back into a valid lease (its request stored nothing); False when there is none
        (the caller gives it back to the bucket instead)."""
        with self._lock:
            lease = self._held.get(bucket)
            if lease is None or lease.until <= self._clock():
                return False
            lease.tokens += 1
            return True


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
            "default_burst": int(tenant_burst), "name": f"enqueue:{tenant_id}", "now": now, "want": 1, "back": 0}


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
