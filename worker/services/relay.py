"""The outbox relay: turns committed events into jobs, on EVERY worker.

Not leader-only: batches are claimed with ``FOR UPDATE SKIP LOCKED``, so the
relays of all workers share the work.  Each pass (:meth:`Relay.run_once`)
relays batches until none is full, each in one transaction
(:func:`opsboard.outbox.relay_events`).  The loop waits on ``opsboard_outbox``
through the process's one LISTEN connection (a waiter of the worker's
:class:`opsboard.pgnotify.Hub`) and polls every ``poll_interval`` as a
fallback, so a lost notification or a dropped connection delays events, never
loses them.

A producer's session notifies at most once per ``opsboard.outbox_notify_interval_ms``
(100 ms; migration 0017), so that publishers do not queue on PostgreSQL's
notify lock at commit: a transaction committed less than that after its
session's notified one sends nothing.  So once woken (or after relaying
anything) the relay polls every ``active_poll`` for ``active_window``
seconds -- far longer than the notify interval -- and only then falls back to
``poll_interval``: a suppressed notification costs at most ``active_poll``.  An
empty pass is one statement (:func:`opsboard.outbox.relay_events` in
autocommit), so that polling is cheap.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg

from opsboard import db, outbox, pgnotify

log = logging.getLogger("worker.relay")

CHANNEL = "opsboard_outbox"


@dataclass(frozen=True)
class RelayConfig:
    #: Seconds between polls when no notification arrives.
    poll_interval: float = 1.0
    #: Events per transaction.
    batch: int = 1000
    #: After a notification, or a pass that relayed events, pass this often (empty: one statement) ...
    active_poll: float = 0.005
    #: ... for this many seconds (much longer than the producers' notify interval, 0.1 s).
    active_window: float = 2.0
    #: After the hub (re)starts listening (and when the loop starts), poll actively this long: a producer that notified just
    #: before we listened stays silent for its notify interval (0.1 s by default).  Not the whole
    #: active window: every worker start would poll 400 times for nothing.
    connect_window: float = 0.5


class Relay:
    name = "relay"

    def __init__(self, config: RelayConfig = RelayConfig()):
        self.config = config
        self.interval = config.poll_interval
        self._logged: dict = {}
        #: The last batch routed events in Python: the next starts with its transaction.
        self._python = False

    def run_once(self, conn: psycopg.Connection, now: datetime | None = None) -> int:
        """Relay until no full batch is left; returns the number of events relayed."""
        total = 0
        while True:
            result = outbox.relay_events(conn, self.config.batch, now, expect_python=self._python)
            self._python = result.in_python > 0
            for event_id, reason in result.failed:
                if self._first_in_a_while(event_id):  # passes come every active_poll while events flow
                    log.error("event %s cannot be relayed: %s", event_id, reason, extra={"event_id": event_id})
            for event_id, reason in result.parked:
                log.error("event %s parked as unroutable (relayed without jobs, audited): %s", event_id, reason,
                          extra={"event_id": event_id})
            total += result.events
            handled = result.events + len(result.parked)
            if handled + len(result.failed) < self.config.batch or not handled:
                return total

    #: An event that cannot be relayed is logged at most this often (seconds).
    FAILURE_LOG_EVERY = 10.0

    def _first_in_a_while(self, event_id) -> bool:
        now = time.monotonic()
        if len(self._logged) > 10_000:
            self._logged.clear()
        if now - self._logged.get(event_id, -self.FAILURE_LOG_EVERY) < self.FAILURE_LOG_EVERY:
            return False
        self._logged[event_id] = now
        return True

    def loop(self, hub: pgnotify.Hub, pool, stopping: threading.Event, *,
             waiter: pgnotify.Waiter | None = None) -> None:
        """Run passes until ``stopping``: on each notification, every ``active_poll`` while recently
        active (an empty pass is one read-only statement), else every ``poll_interval``.

        ``hub`` is the process's LISTEN connection; ``waiter`` one already registered on it for
        :data:`CHANNEL` (else the loop registers its own).  The loop waits on the waiter, not on
        ``stopping``: whoever sets ``stopping`` stops the hub too (which wakes every waiter).
        """
        waiter = waiter or hub.waiter(CHANNEL)
        connect_window = min(self.config.connect_window, self.config.active_window)
        failures, active_until = 0, time.monotonic() + connect_window
        try:
            while not stopping.is_set():
                try:
                    with pool.connection() as conn:
                        n = self.run_once(conn)
                except Exception as exc:  # a relay failure must not stop the worker's claim loops
                    if stopping.is_set():
                        break  # the worker is closing its pool
                    failures += 1
                    # One line when the passes start failing (a database that says no: read-only, away),
                    # then quiet while it lasts, and one when a pass succeeds again (issue 51).
                    log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                            "relay pass failed (%s: %s); backing off", type(exc).__name__,
                            str(exc).strip().splitlines()[0] if str(exc).strip() else "")
                    stopping.wait(min(10.0, 0.2 * 2 ** failures))
                    continue
                if failures:
                    log.warning("relay passes succeed again after %d failure(s)", failures)
                failures = 0
                if n:
                    log.debug("relayed %d event(s)", n, extra={"service": self.name, "count": n})
                    active_until = time.monotonic() + self.config.active_window
                active = time.monotonic() < active_until
                # A notification that came during the pass wakes this at once (waiters count wake-ups).
                waiter.wait(self.config.active_poll if active else self.interval)
                if waiter.notified:
                    active_until = time.monotonic() + self.config.active_window
                elif waiter.resynced:  # the hub (re)started listening: a producer may have notified just before
                    active_until = max(active_until, time.monotonic() + connect_window)
        finally:
            waiter.close()


def start(hub: pgnotify.Hub, pool, stopping: threading.Event, poll_interval: float) -> threading.Thread:
    """Start a worker's relay loop on its ``hub`` and ``pool`` (a daemon thread; it ends once
    ``stopping`` is set).  Its waiter is registered here, before the worker starts its hub, so
    the hub's first LISTEN includes it."""
    relay = Relay(RelayConfig(poll_interval=poll_interval))
    waiter = hub.waiter(CHANNEL, start=False)
    t = threading.Thread(target=relay.loop, args=(hub, pool, stopping),
                         kwargs={"waiter": waiter}, name="relay", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    """``python -m worker.services.relay [--batch N]``: the relay alone, on ``DATABASE_URL`` (tests, debugging)."""
    import argparse
    import os


    p = argparse.ArgumentParser(prog="python -m worker.services.relay")
    p.add_argument("--batch", type=int, default=RelayConfig.batch)
    p.add_argument("--poll", type=float, default=RelayConfig.poll_interval)
    p.add_argument("--active-window", type=float, default=RelayConfig.active_window)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from opsboard.catalogue import activate
    from opsboard.config import Config
    from opsboard.features import build_catalogue
    activate(build_catalogue(Config.from_env()))  # the subscriptions it routes by
    url = os.environ["DATABASE_URL"]
    from opsboard import tenancy
    tenancy.process_bypass(tenancy.Bypass.MAINTENANCE)  # the relay moves every tenant's events
    hub = pgnotify.Hub(url, poll=0.5, name="relay-hub")
    with db.make_pool(url, min_size=1, max_size=2, name="relay") as pool:
        Relay(RelayConfig(poll_interval=args.poll, batch=args.batch, active_window=args.active_window)).loop(hub, pool, threading.Event())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
