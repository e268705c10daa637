"""Obeys what an operator asked of this worker on the Workers page (issue 44).

The ask is this worker's row in ``worker_commands`` (:mod:`opsboard.worker_commands`):
read when the hub delivers a notification naming this worker and at least every
``poll`` seconds (the fallback while the hub is down), then applied:

* quiet: ``lifecycle.quiet`` is set (the fetchers claim nothing) or cleared;
* stop: ``request_stop()`` (the runtime drains and exits as on SIGTERM);
* slots: ``apply_slots(overrides)`` (the runtime resizes the queues' slot threads).

Nothing here imports a feature: the worker's runtime only.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

import psycopg

from opsboard import pgnotify, worker_commands
from opsboard.worker_commands import Command

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from .parts import Lifecycle, OutageLog

log = logging.getLogger("worker")


class CommandWatcher:
    """Reads this worker's command row and applies what changed.

    Its collaborators: the worker's ``pool``, ``lifecycle`` (its ``quiet`` event, and
    ``stopping`` to end the loop), ``outages``, ``request_stop`` and ``apply_slots``
    (the runtime's), ``wake_fetchers`` (to claim at once when un-quieted), and the
    ``worker_id`` the row is keyed by."""

    def __init__(self, *, pool: "ConnectionPool", lifecycle: "Lifecycle", outages: "OutageLog",
                 request_stop: Callable[[], None], apply_slots: Callable[[dict[str, int]], None],
                 worker_id: str, poll: float = 2.0, wake_fetchers: Callable[[], None] = lambda: None):
        self.pool, self.lifecycle, self.outages = pool, lifecycle, outages
        self.wake_fetchers = wake_fetchers
        self.request_stop, self.apply_slots = request_stop, apply_slots
        self.worker_id, self.poll = worker_id, poll
        self.wake = threading.Event()
        self.current = Command()
        self.waiter: pgnotify.Waiter | None = None

    def subscribe(self, hub: pgnotify.Hub) -> None:
        """Wake on a notification naming this worker (registered before the hub starts)."""
        self.waiter = hub.waiter(worker_commands.CHANNEL, self.worker_id, on_wake=self.wake.set, start=False)

    def run_once(self, conn: psycopg.Connection) -> Command:
        """Read the row and apply what differs from what was applied; returns the command in force."""
        wanted = worker_commands.read(conn, self.worker_id)
        self.apply(wanted)
        return wanted

    def apply(self, wanted: Command) -> None:
        before, self.current = self.current, wanted
        quiet = self.lifecycle.quiet
        if wanted.quiet and not quiet.is_set():
            quiet.set()
            log.info("quiet: claiming nothing more (asked on the Workers page)", extra={"worker_id": self.worker_id})
        elif not wanted.quiet and quiet.is_set():
            quiet.clear()
            self.wake_fetchers()
            log.info("claiming again (asked on the Workers page)", extra={"worker_id": self.worker_id})
        if wanted.slots != before.slots:
            self.apply_slots(dict(wanted.slots))
        if wanted.stop_requested_at is not None and before.stop_requested_at is None:
            log.info("stop asked on the Workers page: draining as on SIGTERM", extra={"worker_id": self.worker_id})
            self.request_stop()

    def run(self) -> None:
        stopping = self.lifecycle.stopping
        while not stopping.is_set():
            self.wake.clear()
            try:
                with self.pool.connection() as conn:
                    self.run_once(conn)
            except psycopg.Error as exc:
                if not stopping.is_set():
                    self.outages.trouble(exc, "worker commands")
            self.wake.wait(self.poll)
        if self.waiter is not None:
            self.waiter.close()
