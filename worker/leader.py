"""Leadership and the maintenance services the leader runs.

One worker at a time holds a session advisory lock (:class:`LeaderLock`) and
runs the services (reaper, expiry, depth, pruner, alerts) on their intervals.
Services are isolated from each other and from the claim loops: one whose
``run_once`` raises is logged with its name, counted in
``service_errors`` (exported as ``opsboard_service_errors_total{service}``),
backed off and tried again, while everything else goes on.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import psycopg

from opsboard import db
from opsboard.schema import LEADER_LOCK_KEY

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from .parts import OutageLog

log = logging.getLogger("worker.leader")

#: The longest a failing service waits before its next try.
SERVICE_BACKOFF_MAX = 300.0


class LeaderLock:
    """Leadership through a session advisory lock on a dedicated connection.

    The lock lives as long as the connection: a leader that dies (or loses its
    connection) frees it, and another worker takes over on its next try.  A
    leader that stops unlocks explicitly (:meth:`release`), so that the next
    one's try succeeds at once.
    """

    def __init__(self, url: str, key: int = LEADER_LOCK_KEY):
        self.url, self.key, self.conn = url, key, None
        self.held = False

    def try_hold(self) -> bool:
        try:
            if self.conn is None or self.conn.closed:
                self.held = False
                self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            if self.held:
                self.conn.execute("SELECT 1")  # still connected, so still held
                return True
            self.held = bool(self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])
            if self.held:
                log.info("this worker is now the leader")
            return self.held
        except psycopg.Error:
            self.held = False
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return False

    def release(self) -> None:
        """Give the lock up at once, then close the connection.

        Closing alone is not enough for a prompt hand-over: the server frees a
        session lock only when it has ended the backend, which on a busy
        server comes some time after the socket closed, and the next leader's
        try would fail meanwhile.  A connection already broken cannot unlock;
        its backend is gone or going, and the lock with it.
        """
        if self.conn is not None and not self.conn.closed:
            if self.held:
                try:
                    self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
                except psycopg.Error:
                    pass
            self.conn.close()
        self.conn, self.held = None, False


class Leader:
    """Tries for leadership; while held, runs each due service in isolation.

    Its collaborators: the ``services``; the worker's ``pool`` they run on; the ``direct_url``
    its lock's session connects to (never through a transaction pooler); the ``stopping``
    event; the ``outages`` log.  :attr:`is_leader` says whether it holds the lock now.
    """

    def __init__(self, services: list, *, pool: "ConnectionPool", direct_url: str, stopping: threading.Event,
                 outages: "OutageLog"):
        self.services = services
        self.pool, self.direct_url, self.stopping, self.outages = pool, direct_url, stopping, outages
        #: This worker holds the leader's lock (and runs the services).
        self.is_leader = False
        self.next_run = {s.name: 0.0 for s in services}
        self.failures = {s.name: 0 for s in services}
        #: Errors not yet added to the ``service_errors`` table (the database was away).
        self.unsaved_errors: dict[str, int] = {}

    def run(self) -> None:
        stopping = self.stopping
        lock = LeaderLock(self.direct_url)  # a session lock: never through a transaction pooler
        try:
            while not stopping.wait(0.2):
                self.is_leader = lock.try_hold()
                if not self.is_leader:
                    stopping.wait(2.0)
                    continue
                self.run_due()
        finally:
            lock.release()
            self.is_leader = False

    def run_due(self, now: float | None = None) -> int:
        """Run every service whose time has come; returns how many ran."""
        ran = 0
        for service in self.services:
            mono = time.monotonic() if now is None else now
            if self.stopping.is_set():
                break
            if mono < self.next_run[service.name]:
                continue
            ran += 1
            ok = self.run_service(service)
            interval = float(service.interval)
            if ok:
                self.failures[service.name] = 0
                self.next_run[service.name] = time.monotonic() + interval
            else:
                self.failures[service.name] += 1
                delay = min(SERVICE_BACKOFF_MAX, max(interval, 0.1) * 2 ** self.failures[service.name])
                self.next_run[service.name] = time.monotonic() + delay
        return ran

    def run_service(self, service) -> bool:
        """One ``run_once``; any exception is contained here.  Returns whether it succeeded."""
        try:
            with self.pool.connection() as conn:
                n = service.run_once(conn)
            if n:
                level = logging.DEBUG if getattr(service, "quiet", False) else logging.INFO
                log.log(level, "%s handled %d", service.name, n, extra={"service": service.name, "count": n})
            return True
        except Exception as exc:
            if isinstance(exc, psycopg.Error) and db.unavailable(exc):
                # The database cannot take the work now (away, read-only, a lock timeout): not the
                # service's fault, one line per outage and no traceback (issue 51).
                self.outages.trouble(exc, f"service {service.name}")
                return False
            log.exception("service %s failed (%s); backing off", service.name, type(exc).__name__,
                          extra={"service": service.name})
            self.unsaved_errors[service.name] = self.unsaved_errors.get(service.name, 0) + 1
            self.save_errors()
            return False

    def save_errors(self) -> None:
        """Add the counted errors to ``service_errors`` (kept in memory while that fails)."""
        pending, self.unsaved_errors = self.unsaved_errors, {}
        try:
            with self.pool.connection() as conn:
                db.execute(conn, "service_error_add",
                           {"services": list(pending), "counts": list(pending.values())})
        except psycopg.Error as exc:
            log.warning("could not count service errors (%s)", type(exc).__name__)
            for name, n in pending.items():
                self.unsaved_errors[name] = self.unsaved_errors.get(name, 0) + n
