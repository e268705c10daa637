"""The queue's history for the dashboard's charts over 24 hours and 7 days (issue 44).

``job_history`` (migration 0094) holds, per 15-minute bucket, queue and type, the
handler outcomes and time histograms summed from ``job_stats`` and the depth
sampled from ``queue_depth_totals``; ``job_depth_minutes`` holds the depth per
minute for the one-hour charts.  :func:`roll_up` keeps both, run by the leader's
history service (``worker/services/history.py``) every minute: its cost is the
last two buckets of statistics and a few depth rows, whatever the number of jobs,
and it adds nothing to a job's completion.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg

from . import db

#: The rollup's bucket (minutes); the 24-hour charts show it as is, the 7-day ones four to a point.
BUCKET_MINUTES = 15
#: Where buckets are aligned (the charts' origin too).
ORIGIN = datetime(2000, 1, 1, tzinfo=timezone.utc)
#: Days of rollup kept (the longest chart is 7 days).
KEEP_DAYS = 35


def bucket_start(at: datetime) -> datetime:
    """The start of the rollup bucket holding ``at``."""
    seconds = BUCKET_MINUTES * 60
    return ORIGIN + timedelta(seconds=((at - ORIGIN).total_seconds() // seconds) * seconds)


def roll_up(conn: psycopg.Connection, now: datetime | None = None, *, since_days: float | None = None,
            keep_days: int = KEEP_DAYS) -> int:
    """Bring the history up to date: recompute the current and the previous bucket
    (with ``since_days``, every bucket of that many days: a backfill) from
    ``job_stats``, take one depth sample, and drop what is older than the
    retention.  One transaction; returns the rollup rows written."""
    with conn.transaction():
        # Two leaders for a moment (a lost lock) roll up one after the other.
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.history_roll_up', 0))")
        current = db.now(conn, now)
        back = timedelta(days=since_days) if since_days else timedelta(minutes=BUCKET_MINUTES)
        params = {"since": bucket_start(current - back), "bucket_minutes": BUCKET_MINUTES, "origin": ORIGIN,
                  "now": current}
        n = db.execute(conn, "metrics_history_roll_up", params).rowcount
        db.execute(conn, "metrics_history_depth_sample", params)
        db.execute(conn, "metrics_history_prune", {"now": current, "keep_days": keep_days})
    return n
