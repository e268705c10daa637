"""Reads on a streaming replica, with the primary as the fallback.

``OPSBOARD_READ_DATABASE_URL`` names a streaming replica of the primary.  The
dashboard's heavy reads (queue health and its charts, job search, dead-letter
groups, the audit log) and ``/metrics`` take their connection from
:meth:`ReadRouter.connection`; everything else (writes, claims, the pages an
action redirects to) stays on the primary.

The router checks the replica at most once a second (:data:`CHECK_EVERY`), with
its own short-lived connection and a one-second connect timeout, and sends a
read to the primary instead when the replica

* cannot be reached, or is not in recovery (a promoted or misconfigured server),
* is further behind than ``OPSBOARD_READ_MAX_LAG`` seconds, or
* has not yet replayed the reader's own last write: after an action the web app
  stores the primary's WAL position in the session (:func:`remember_write`) and
  a later read by the same session waits for nothing: it goes to the primary
  until the replica has replayed that position (read your own writes).

Lag is measured against the primary's current WAL position: a replica that has
replayed it is 0 s behind, however long ago the last write was; one that has not
is ``now - last replayed transaction`` behind.  A replica that is down is tried
again after :data:`RETRY_DOWN` seconds, so a failed replica costs each request
nothing.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Iterator

import psycopg
from psycopg_pool import ConnectionPool

from . import db

log = logging.getLogger(__name__)

#: Seconds between two checks of the replica's position.
CHECK_EVERY = 1.0
#: A write position no replica reaches: reads go to the primary (the position could not be read).
UNKNOWN_LSN = (1 << 64) - 1
#: Seconds a replica found down is left alone before the next check.
RETRY_DOWN = 5.0


def lsn_value(lsn: str | None) -> int | None:
    """A WAL position ``"16/B374D848"`` as one integer (``None`` stays ``None``)."""
    if not lsn:
        return None
    hi, _, lo = lsn.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass(frozen=True)
class ReplicaStatus:
    """What the last check found."""

    configured: bool
    usable: bool = False
    #: ``up``, ``down``, ``lagging``, ``not_replica`` or ``off`` (none configured).
    state: str = "off"
    lag_seconds: float | None = None
    behind_bytes: int | None = None
    replay_lsn: int | None = None
    checked_at: float = 0.0
    max_lag: float = 0.0


class ReadRouter:
    """Hands out read connections: the replica's when it is usable, else the primary's."""

    def __init__(self, primary: db.Database, replica_url: str | None, *, max_lag: float = 10.0,
                 pool_max: int = 10, pooler: str = "none"):
        self.primary = primary
        self.replica_url = replica_url
        self.pooler = pooler  # OPSBOARD_DATABASE_POOLER describes the read URL too
        self.max_lag = max_lag
        # Each connection is checked as it leaves the pool (one empty round trip): a replica that went
        # away since the last check then costs a fallback to the primary, never a failed page.
        self.replica = (db.Database(replica_url, min_size=0, max_size=pool_max, name="web-read", pooler=pooler,
                                    check=ConnectionPool.check_connection)
                        if replica_url else None)
        if self.replica is not None:
            self.replica.open(check=False)
        self._status = ReplicaStatus(configured=self.replica is not None, max_lag=max_lag)
        self._lock = threading.Lock()

    def close(self) -> None:
        if self.replica is not None:
            self.replica.close()

    # ------------------------------------------------------------ the check

    def status(self) -> ReplicaStatus:
        """The replica's last known state, checked again when older than :data:`CHECK_EVERY`."""
        st = self._status
        if self.replica is None:
            return st
        wait = RETRY_DOWN if st.state == "down" else CHECK_EVERY
        if time.monotonic() - st.checked_at < wait or not self._lock.acquire(blocking=False):
            return st  # fresh enough, or another thread is checking right now
        try:
            self._status = self._check()
        finally:
            self._lock.release()
        return self._status

    def _check(self) -> ReplicaStatus:
        now = time.monotonic()
        base = {"configured": True, "checked_at": now, "max_lag": self.max_lag}
        try:
            with self.primary.connection() as conn:
                primary_lsn = db.one(conn, "replica_primary_lsn")["lsn"]
        except psycopg.Error:
            # The primary is the one in trouble: nothing to compare against, and the
            # replica is the only copy that can answer.  Keep the last verdict.
            return ReplicaStatus(**{**self._status.__dict__, "checked_at": now})
        try:
            conn = db.connect(self.replica_url, pooler=self.pooler, connect_timeout=1)
        except db.DatabaseUnavailable as exc:
            if self._status.state != "down":
                log.warning("read replica unavailable, reads go to the primary: %s", exc)
            return ReplicaStatus(**base, state="down")
        try:
            with conn:
                row = db.one(conn, "replica_status", {"primary_lsn": primary_lsn})
        except psycopg.Error as exc:
            log.warning("read replica check failed, reads go to the primary: %s", db.connect_failure_reason(exc))
            return ReplicaStatus(**base, state="down")
        if not row["in_recovery"]:
            if self._status.state != "not_replica":
                log.warning("OPSBOARD_READ_DATABASE_URL is not a server in recovery (a promoted replica?): "
                            "reads go to the primary")
            return ReplicaStatus(**base, state="not_replica")
        lag = row["lag_seconds"]
        lagging = lag is None or lag > self.max_lag
        if lagging and self._status.state == "up":
            log.warning("read replica is %s s behind (bound %s s): reads go to the primary",
                        "?" if lag is None else round(lag, 1), self.max_lag)
        return ReplicaStatus(**base, usable=not lagging, state="lagging" if lagging else "up",
                             lag_seconds=lag, behind_bytes=row["behind_bytes"],
                             replay_lsn=lsn_value(row["replay_lsn"]))

    # ------------------------------------------------------------ reads

    def target(self, min_lsn: int | None = None) -> db.Database:
        """The database a read goes to; ``min_lsn``: a write the reader must see."""
        st = self.status()
        if not st.usable or self.replica is None:
            return self.primary
        if min_lsn is not None and (st.replay_lsn is None or st.replay_lsn < min_lsn):
            return self.primary
        return self.replica

    @contextmanager
    def connection(self, min_lsn: int | None = None) -> Iterator[psycopg.Connection]:
        """A read connection (autocommit, dict rows): the replica's when usable, else the primary's.

        A replica whose pool cannot hand out a connection is marked down and the
        read goes to the primary; an error inside the read itself is the caller's.
        """
        target = self.target(min_lsn)
        with ExitStack() as stack:
            if target is self.replica:
                try:
                    conn = stack.enter_context(target.pool.connection(timeout=1.0))
                except Exception as exc:  # PoolTimeout, OperationalError: gone between two checks
                    log.warning("read replica connection failed, reads go to the primary: %s",
                                type(exc).__name__)
                    self._mark_down()
                    target = self.primary
            if target is self.primary:
                conn = stack.enter_context(self.primary.connection())
            try:
                yield conn
            except psycopg.OperationalError:
                if target is self.replica:  # lost in the middle of a read: the next reads go to the primary
                    self._mark_down()
                raise

    def _mark_down(self) -> None:
        self._status = ReplicaStatus(configured=True, state="down", checked_at=time.monotonic(),
                                     max_lag=self.max_lag)

    def primary_lsn(self) -> int | None:
        """The primary's WAL position now (after a write, for :meth:`connection`'s ``min_lsn``)."""
        with self.primary.connection() as conn:
            return lsn_value(db.one(conn, "replica_primary_lsn")["lsn"])
