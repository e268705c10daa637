"""The worker's claim: a bounded, tenant-fair batch of ready jobs under ``FOR UPDATE SKIP LOCKED``,
within the per-type and per-provider limits, in one short transaction.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .. import db, jobtypes, pauses


ZERO_TENANT = uuid.UUID(int=0)


@dataclass
class Claim:
    """A claimed batch and the round-robin cursor for the next claim."""

    rows: list[dict]
    next_after_tenant: uuid.UUID = ZERO_TENANT


def claim_params(queue: str, worker_id: str, limit: int, lease_seconds: float, *,
                 after_tenant: uuid.UUID | None = None, max_tenants: int | None = None,
                 now: datetime | None = None, holds: "pauses.Holds | None" = None) -> dict:
    """The parameters of ``job_claim_many`` for one claim (see :func:`claim`)."""
    holds = holds or pauses.NO_HOLDS
    limits = jobtypes.concurrency_limits(queue, holds.limit_overrides)
    return {**holds.params(queue, now),"queue": queue, "worker": worker_id, "limit": limit, "lease": lease_seconds, "now": now,
            "after_tenant": after_tenant or ZERO_TENANT, "max_tenants": max_tenants or max(1, limit),
            "limit_types": list(limits.types), "limit_type_limits": list(limits.type_limits),
            "limit_type_groups": list(limits.type_groups), "limit_groups": list(limits.groups),
            "limit_group_limits": list(limits.group_limits)}


def claim(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float, *,
          after_tenant: uuid.UUID | None = None, max_tenants: int | None = None,
          now: datetime | None = None, holds: "pauses.Holds | None" = None) -> Claim:
    """Claim up to ``limit`` ready jobs of ``queue``, fairly across tenants, in one short transaction.

    Tenants with due work are visited round-robin from ``after_tenant`` (pass
    back ``next_after_tenant``); each gives at most its weighted share.  When
    the queue has job types or providers with concurrency limits, the claim
    first takes their advisory locks so that check-and-claim is atomic across
    every worker on every host.

    Held work (:mod:`opsboard.pauses`) is never claimed: pass the ``holds`` in
    force (the worker keeps them fresh), or the claim reads them first.
    """
    if limit <= 0:
        return Claim([], after_tenant or ZERO_TENANT)
    if holds is None:
        holds = pauses.read_holds(conn)
    limits = jobtypes.concurrency_limits(queue, holds.limit_overrides)
    # A tenant's concurrency limit (migration 0029) is checked and claimed under its lock too.
    lock_names = sorted(set(limits.lock_names) | {f"tenant:{t}" for t, _ in holds.tenant_limits})
    max_tenants = max_tenants or max(1, limit)
    params = claim_params(queue, worker_id, limit, lease_seconds, after_tenant=after_tenant,
                          max_tenants=max_tenants, now=now, holds=holds)

    def run() -> list[dict]:
        rows = db.all_rows(conn, "job_claim_many", params)
        if not rows and params["after_tenant"] != ZERO_TENANT:
            # The walk started after the last tenant with due work: wrap around
            # now, or a worker with one free slot idles a whole poll interval
            # every other claim.
            rows = db.all_rows(conn, "job_claim_many", {**params, "after_tenant": ZERO_TENANT})
        return rows

    if not lock_names and conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # No advisory lock to hold: each statement is its own short transaction
        # (the wrap-around claim is a claim of its own), without the BEGIN and
        # COMMIT round trips.
        rows = run()
    elif conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE \
            and psycopg.Pipeline.is_supported():
        # The limit locks: BEGIN, the locks, the claim and COMMIT go out in one
        # round trip (pipeline mode; the rows are read after it), so the locks
        # are held only while the server works, never while this process
        # waits for its turn to read an answer.  Still separate statements:
        # the claim's snapshot is taken after the locks are held.
        # (Explicit BEGIN/COMMIT: psycopg's transaction() syncs on entering
        # and on leaving, three round trips.)
        def locked_claim(p: dict) -> list[dict]:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    db.execute(conn, "job_claim_lock_limits", {"names": lock_names})
                    cur = db.execute(conn, "job_claim_many", p)
                    conn.execute("COMMIT")
            except BaseException:
                # A failed statement leaves the explicit transaction aborted (the
                # COMMIT behind it was skipped): end it before the pool gets the connection.
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            return cur.fetchall()

        rows = locked_claim(params)
        if not rows and params["after_tenant"] != ZERO_TENANT:
            rows = locked_claim({**params, "after_tenant": ZERO_TENANT})  # the wrap-around (see run)
    else:
        with conn.transaction():
            if lock_names:
                db.execute(conn, "job_claim_lock_limits", {"names": lock_names})
            rows = run()
    if not rows:
        return Claim([], ZERO_TENANT)
    seen, last = rows[0].pop("tenants_seen"), rows[0].pop("last_tenant")
    for r in rows[1:]:
        r.pop("tenants_seen", None)
        r.pop("last_tenant", None)
    # Visited as many tenants as allowed: continue after the last one next time;
    # otherwise the walk reached the end of the tenants: wrap around.
    nxt = uuid.UUID(last) if seen >= max_tenants and last else ZERO_TENANT
    return Claim(rows, nxt)


def claim_batch(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float,
                now: datetime | None = None) -> list[dict]:
    """Claim up to ``limit`` ready jobs of ``queue`` (see :func:`claim`), without a cursor."""
    return claim(conn, queue, worker_id, limit, lease_seconds, now=now).rows
