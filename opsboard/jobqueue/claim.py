"""The worker's claim: a bounded, tenant-fair batch of ready jobs under ``FOR UPDATE SKIP LOCKED``,
within the per-type, per-provider and per-key limits (a type's ``concurrency_key``, issue 50), in one
short transaction.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import tuple_row

from .. import db, jobtypes, pauses


ZERO_TENANT = uuid.UUID(int=0)


@dataclass
class Claim:
    """A claimed batch and the round-robin cursor for the next claim."""

    rows: list[dict]
    next_after_tenant: uuid.UUID = ZERO_TENANT
    #: Nothing claimed although jobs were due: other workers' claims held or took every
    #: candidate (the walk had some).  A worker then claims again soon instead of waiting for
    #: an enqueue's notification, which may never come while the queue drains.
    contended: bool = False
    #: The claim met work that needs the limit locks and got most of its batch under them:
    #: the next claim had better take the locks first (pass it as ``locked_first``).
    locked_next: bool = False


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
            "limit_group_limits": list(limits.group_limits), "limit_group_sides": list(limits.group_sides),
            "key_types": list(limits.key_types), "key_limits": list(limits.key_limits),
            "locked": True}


def claim(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float, *,
          after_tenant: uuid.UUID | None = None, max_tenants: int | None = None,
          now: datetime | None = None, holds: "pauses.Holds | None" = None, locked_first: bool = False) -> Claim:
    """Claim up to ``limit`` ready jobs of ``queue``, fairly across tenants, in one short transaction.

    Tenants with due work are visited round-robin from ``after_tenant`` (pass
    back ``next_after_tenant``); each gives at most its weighted share.  When
    the queue has job types or providers with concurrency limits, the claim
    first takes their advisory locks so that check-and-claim is atomic across
    every worker on every host; on an autocommit connection, only once the fair
    order reaches a candidate that needs them (see below).

    Held work (:mod:`opsboard.pauses`) is never claimed: pass the ``holds`` in
    force (the worker keeps them fresh), or the claim reads them first.

    ``locked_first`` (the last claim's ``locked_next``): take the limit locks at
    once, one walk under them, instead of a walk without them first.
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
    idle = conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if not idle:
        with conn.transaction():
            if lock_names:
                db.execute(conn, "job_claim_lock_limits", {"names": lock_names})
            return _result(_claim_wrapping(conn, params), max_tenants)
    if not lock_names:
        # No advisory lock to hold: each statement is its own short transaction
        # (the wrap-around claim is a claim of its own), without the BEGIN and
        # COMMIT round trips.
        return _result(_claim_wrapping(conn, params), max_tenants)
    # First without the limit locks (its own short transaction): the claim then
    # takes only the candidates ahead of the first one that needs them (of a
    # limited type, or of a tenant with a concurrency limit), so that workers'
    # claims do not queue on the locks while no limited work is due (they
    # serialized every claim: during `opsboard bench --scenario process_2` the
    # second worker waited on the lock about as long as the first claimed).
    # When such a candidate was in the way, or nothing came, the claim goes on
    # under the locks, in the same fair order, for the rest of the batch.
    #
    # While such candidates lead the fair order (a flood of one limited type: the
    # walk without the locks claimed a few jobs, then the one under them walked the
    # same tenants again for the rest: two walks per claim at 10,000,000 jobs,
    # `opsboard bench --scenario scale`), the claim says so (locked_next) and the
    # worker's next one takes the locks first: one walk.  It goes back to walking
    # without them once a walk under them meets no candidate that needs them.
    if locked_first:
        locked = _claim_locked(conn, lock_names, params)
        result = _result(locked, max_tenants)
        result.locked_next = bool(locked.tail and locked.tail[2])
        return result
    free = _claim_wrapping(conn, {**params, "locked": False})
    rest = limit - len(free)
    # tail[2]: a candidate needed the locks.  (No tail: the walk found no tenant with due work.)
    # Without such a candidate the locked claim would walk the same candidates again.
    if free.tail is None or not free.tail[2] or rest <= 0:
        return _result(free, max_tenants)
    rest_params = claim_params(queue, worker_id, rest, lease_seconds, after_tenant=after_tenant,
                               max_tenants=max_tenants, now=now, holds=holds)
    try:
        locked = _claim_locked(conn, lock_names, rest_params)
    except psycopg.Error:
        if not free:
            raise
        # The jobs claimed already are this worker's: hand them over (a lasting
        # error shows again at the connection's next use).
        return _result(free, max_tenants)
    result = _result(_Claimed(locked + free, locked.tail if locked else free.tail,
                              contended=locked.contended or free.contended), max_tenants)
    result.locked_next = len(locked) > len(free)  # most of the batch needed the second walk
    return result


def _claim_locked(conn: psycopg.Connection, lock_names: list[str], params: dict) -> "_Claimed":
    """The claim under the limit locks, in a transaction of its own (autocommit connection)."""
    if psycopg.Pipeline.is_supported():
        return _claim_locked_pipelined(conn, lock_names, params)
    with conn.transaction():
        db.execute(conn, "job_claim_lock_limits", {"names": lock_names})
        return _claim_wrapping(conn, params)


#: job_claim_many's last columns: the statement's own figures, the same on every row.
_TAIL = ("tenants_seen", "last_tenant", "lim", "candidates")


class _Claimed(list):
    """Claimed rows, each a dict of the job's columns, and the statement's figures once
    (``tail``: tenants_seen, last_tenant, lim, candidates) instead of in every row;
    ``contended``: a run of the statement locked nothing out of candidates it had."""

    def __init__(self, rows=(), tail: tuple | None = None, contended: bool = False):
        super().__init__(rows)
        self.tail = tail
        self.contended = contended


def _claimed(cur: psycopg.Cursor) -> _Claimed:
    """The rows of a claim's cursor (tuple rows) as :class:`_Claimed`: one dict per job without
    the statement's figures.  (psycopg's dict rows, then deleting three keys from each, were a
    visible share of a worker's CPU on no-op jobs: py-spy.)"""
    rows = cur.fetchall()
    names = [c.name for c in cur.description]
    n = len(names) - len(_TAIL)
    assert tuple(names[n:]) == _TAIL, names
    keys = names[:n]
    tail = rows[0][n:] if rows else None
    if rows and rows[0][0] is None:  # nothing locked: the statement's one row without a job
        return _Claimed((), tail, contended=bool(tail[3]))
    return _Claimed([dict(zip(keys, v)) for v in rows], tail)


def _claim_wrapping(conn: psycopg.Connection, params: dict) -> _Claimed:
    """``job_claim_many``, and once more from the first tenant when the walk started
    after the last tenant with due work (else a worker with one free slot idles a
    whole poll interval every other claim)."""
    rows = _run_claim(conn, params)
    if not rows and params["after_tenant"] != ZERO_TENANT:
        first = rows
        rows = _run_claim(conn, {**params, "after_tenant": ZERO_TENANT})
        rows.contended = rows.contended or (first.contended and not rows)
    return rows


def _claim_cursor(conn: psycopg.Connection, params: dict) -> psycopg.Cursor:
    """``job_claim_many`` sent: prepared at its first run (a worker runs it over and over), its
    rows in binary (20 columns per job, whose text forms, uuids and times, cost the server an
    output function and the worker a parse each) and as tuples (see :func:`_claimed`)."""
    return conn.cursor(row_factory=tuple_row, binary=True).execute(
        db.queries["job_claim_many"], params, prepare=db.prepare_now(conn))


def _run_claim(conn: psycopg.Connection, params: dict) -> _Claimed:
    return _claimed(_claim_cursor(conn, params))


def _claim_locked_pipelined(conn: psycopg.Connection, lock_names: list[str], params: dict) -> _Claimed:
    """The claim under the limit locks: BEGIN, the locks, the claim and COMMIT in one
    round trip (pipeline mode; the rows are read after it), so the locks are held
    only while the server works, never while this process waits for its turn to
    read an answer.  Still separate statements: the claim's snapshot is taken after
    the locks are held.  (Explicit BEGIN/COMMIT: psycopg's transaction() syncs on
    entering and on leaving, three round trips.)"""
    def once(p: dict) -> _Claimed:
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                db.execute(conn, "job_claim_lock_limits", {"names": lock_names})
                cur = _claim_cursor(conn, p)
                conn.execute("COMMIT")
        except BaseException:
            # A failed statement leaves the explicit transaction aborted (the
            # COMMIT behind it was skipped): end it before the pool gets the connection.
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            raise
        return _claimed(cur)

    rows = once(params)
    if not rows and params["after_tenant"] != ZERO_TENANT:
        first = rows
        rows = once({**params, "after_tenant": ZERO_TENANT})  # the wrap-around (see _claim_wrapping)
        rows.contended = rows.contended or (first.contended and not rows)
    return rows


def _result(rows: _Claimed, max_tenants: int) -> Claim:
    """The claimed rows and the cursor for the next claim (from the statement's figures:
    the last statement's when two ran)."""
    if not rows:
        return Claim([], ZERO_TENANT, contended=rows.contended)
    seen, last, _, _ = rows.tail
    rows = list(rows)
    # Visited as many tenants as allowed: continue after the last one next time;
    # otherwise the walk reached the end of the tenants: wrap around.
    nxt = uuid.UUID(last) if seen >= max_tenants and last else ZERO_TENANT
    return Claim(rows, nxt)


def claim_batch(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float,
                now: datetime | None = None) -> list[dict]:
    """Claim up to ``limit`` ready jobs of ``queue`` (see :func:`claim`), without a cursor."""
    return claim(conn, queue, worker_id, limit, lease_seconds, now=now).rows
