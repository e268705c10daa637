"""Retention of finished jobs: the pruner's deletes (the leader's pruner service runs them)."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

import psycopg

from .. import db
from ..schema import uuid7_floor


@dataclass(frozen=True)
class PruneSlice:
    """What one :func:`prune_finished_slice` did: ``deleted`` jobs, and ``resume_after``, the last id
    its walk read when it stopped at its deadline (the next slice's start), or None when the walk
    reached the cutoff (nothing older is left to read until the cutoff moves)."""

    deleted: int
    resume_after: uuid.UUID | None


def walk_in_index_order(conn: psycopg.Connection) -> None:
    """In a maintenance batch's transaction, before its statement (the pruners' walk up a primary key, the
    expiry's oldest expired jobs): the batch reads its index in order, a batch's worth, with or without
    table statistics (``job_walk_in_index_order``)."""
    db.one(conn, "job_walk_in_index_order")


def prune_finished_slice(conn: psycopg.Connection, cutoff: datetime, batch: int = 5000, *,
                         after: uuid.UUID | None = None, until: float | None = None,
                         clock: Callable[[], float] = time.monotonic) -> PruneSlice:
    """Delete succeeded and cancelled jobs finished before ``cutoff``, with their
    attempt rows, from the id ``after`` on (the start when None), until the walk
    reaches the cutoff or ``clock()`` passes ``until`` (no deadline when None).

    Batches of ``batch`` walk the primary key upwards (``job_prune_finished``),
    each in its own short transaction: the claim never waits on a long one, and
    the jobs kept in the range (dead letters) are read once per walk, not once per
    batch.  A slice ends after the batch that crossed the deadline, so a backlog of
    millions is deleted by many slices that resume where the last one stopped
    (the pruner service rests between them).
    """
    total = 0
    after = after or uuid.UUID(int=0)
    while True:
        with conn.transaction():
            walk_in_index_order(conn)
            row = db.one(conn, "job_prune_finished", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                      "after_id": after, "limit": batch})
        total += row["n"]
        if row["seen"] < batch:
            return PruneSlice(total, None)
        after = row["last_id"]
        if until is not None and clock() >= until:
            return PruneSlice(total, after)


def prune_finished(conn: psycopg.Connection, cutoff: datetime, batch: int = 5000) -> int:
    """Delete every succeeded and cancelled job finished before ``cutoff``, with its
    attempt rows, in one walk without a deadline; returns how many jobs went."""
    return prune_finished_slice(conn, cutoff, batch).deleted
