"""Retention of finished jobs: the pruner's deletes (the leader's pruner service runs them)."""
from __future__ import annotations

import uuid
from datetime import datetime

import psycopg

from .. import db
from ..schema import uuid7_floor


def prune_finished(conn: psycopg.Connection, cutoff: datetime, batch: int = 5000) -> int:
    """Delete succeeded and cancelled jobs finished before ``cutoff``, with their
    attempt rows; returns how many jobs went.

    Batches of ``batch`` walk the primary key upwards (``job_prune_finished``),
    each in its own short transaction: the claim never waits on a long one, and
    the jobs kept in the range (dead letters) are read once per call.
    """
    total = 0
    after = uuid.UUID(int=0)
    while True:
        with conn.transaction():
            row = db.one(conn, "job_prune_finished", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                      "after_id": after, "limit": batch})
        total += row["n"]
        if row["seen"] < batch:
            return total
        after = row["last_id"]
