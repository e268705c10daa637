"""What the worker's parts are handed besides each other: the process's lifecycle, its log of
database outages, and the narrow views one part has of another.

Each part (executor, fetcher, completer, keeper, leader, listener) names its collaborators in
its constructor, as River's job executor does; the runtime (:class:`worker.runner.Worker`)
builds and wires them.  No part imports the runtime: what a part needs of it is here, or a
callback it is given.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from psycopg_pool import PoolTimeout

from opsboard import db

log = logging.getLogger("worker")

#: The longest wait between two tries while the database is away (plus jitter below it).
RETRY_DELAY_MAX = 1.0


@dataclass
class Lifecycle:
    """Where the worker process is in its life: every loop ends once ``stopping`` is set;
    ``stopped`` is set when the shutdown handed the slots their last ``None`` (the completer
    and the keeper then finish); ``shutdown_deadline`` is the ``time.monotonic()`` by which
    the shutdown must be done (``None`` until it begins).  While ``quiet`` is set (an operator's
    ask on the Workers page, :mod:`worker.commands`) the fetchers claim nothing."""

    stopping: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    quiet: threading.Event = field(default_factory=threading.Event)
    shutdown_deadline: float | None = None


class OutageLog:
    """The process's view of the database's health: one line when it goes away, one when it is
    back, and the backoff between two tries meanwhile.  ``pools`` are checked (their broken
    idle connections dropped) when an outage begins and when it ends."""

    def __init__(self, pools=()):
        self.pools = tuple(pools)
        #: ``time.monotonic()`` when the current outage began (``None``: no outage).
        self.down_since: float | None = None
        self._back_at = float("-inf")
        self._lock = threading.Lock()

    @staticmethod
    def retry_delay(failures: int) -> float:
        """Bounded exponential backoff with jitter: at most :data:`RETRY_DELAY_MAX`."""
        return min(RETRY_DELAY_MAX, 0.05 * 2 ** min(failures, 10)) * random.uniform(0.5, 1.0)

    def trouble(self, exc: BaseException, what: str) -> None:
        """Note a failed database call: one line when the database goes away, not one per retry.

        A deadlock or a serialization failure is the statement's own conflict with
        another transaction (rolled back whole, safe to retry), not an outage: it is
        logged as what it is and no outage begins.
        """
        # SQLSTATE class 40 (transaction rollback). psycopg's DeadlockDetected is not a subclass of
        # its TransactionRollback, so the class is read from the state, not the exception type.
        if (getattr(exc, "sqlstate", None) or "").startswith("40"):
            kind = "deadlock" if exc.sqlstate == "40P01" else "serialization failure"
            log.warning("%s in %s (SQLSTATE %s); retrying", kind, what, exc.sqlstate)
            return
        # Away, read-only (a failover), shutting down, a lock or statement timeout (opsboard.db.unavailable):
        # one line when it begins and one when it ends, not a line (or a traceback) per retry.
        if db.unavailable(exc):
            if isinstance(exc, PoolTimeout) and time.monotonic() - self._back_at < self._pool_timeout() + 0.5:
                # A wait for a connection that began during the outage, ending
                # just after it: old news, not a new outage.
                return
            with self._lock:
                if self.down_since is not None:
                    return
                self.down_since = time.monotonic()
            log.warning("database unavailable (%s in %s); retrying quietly until it is back",
                        type(exc).__name__, what)
            # Drop the pools' idle connections now (they are all broken), so
            # that none is handed out once the database is back.
            threading.Thread(target=self.check_pools, name="pool-check", daemon=True).start()
        else:
            log.warning("%s failed (%s)", what, type(exc).__name__)

    def ok(self) -> None:
        """Note a successful database call: logs the outage's end and duration once,
        and has the pools replace their broken connections now."""
        if self.down_since is None:
            return
        with self._lock:
            since, self.down_since = self.down_since, None
            self._back_at = time.monotonic()
        if since is None:
            return
        log.warning("database is back after %.1f s", time.monotonic() - since)
        self.check_pools()

    def check_pools(self) -> None:
        for pool in self.pools:
            try:
                pool.check()
            except Exception:  # closed while stopping, or the server still away
                pass

    def _pool_timeout(self) -> float:
        """The first pool's wait for a connection (the worker's own pool)."""
        return self.pools[0].timeout if self.pools else 0.0


class OutcomeSink(Protocol):
    """What the executor sees of the completer: where an outcome goes."""

    def submit(self, item: tuple, *, block: bool = True, timeout: float | None = None) -> bool: ...


class ClaimedJobs(Protocol):
    """What a fetcher sees of the executor: claimed rows are prepared (their batch hooks) before
    the slots take them, and given back unstarted when the worker stops."""

    def prepare(self, rows: list[dict]) -> None: ...

    def release(self, r, why: str, *, block: bool = True) -> None: ...
