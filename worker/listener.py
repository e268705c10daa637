"""The listener: wakes the fetcher of the queue a notification on
``opsboard_jobs`` names (the payload is the queue's name).

It holds no connection of its own: each queue has a waiter on the worker's
one :class:`opsboard.pgnotify.Hub`, whose wake-up sets that queue's
``wake`` event (:class:`worker.fetcher.QueueState`).  A notification for a
queue this worker does not serve wakes nobody.  When the hub (re)connects and
LISTENs, it wakes every queue's fetcher to look once: anything enqueued while
nobody listened is claimed then.  Fetchers also poll, so a lost hub only makes
pick-up slower, never stops it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from opsboard import pgnotify
from opsboard.schema import JOBS_CHANNEL, PAUSES_CHANNEL

if TYPE_CHECKING:
    from .fetcher import HoldsCache, QueueState
    from .parts import OutageLog


def make_hub(direct_url: str, outages: "OutageLog") -> pgnotify.Hub:
    """The worker process's one LISTEN connection (on ``direct_url``: past any pooler).  It
    retries as fast as the claim loops (:meth:`~worker.parts.OutageLog.retry_delay`, at most a
    second apart) and reports to the worker's ``outages`` log: probing that often, it is often
    the first to see the database return."""
    return pgnotify.Hub(direct_url, poll=0.5, name="listener", retry_delay=outages.retry_delay,
                        on_connect=outages.ok, on_error=lambda exc: outages.trouble(exc, "listener"))


class Listener:
    """Wakes the ``queues``' fetchers; a hold's notification also makes ``holds`` stale."""

    def __init__(self, queues: dict[str, "QueueState"], holds: "HoldsCache"):
        self.queues, self.holds = queues, holds
        self.waiters: list[pgnotify.Waiter] = []

    def subscribe(self, hub: pgnotify.Hub) -> None:
        """Register one waiter per queue (without starting ``hub``: the worker starts it
        once every subscriber is in, so that one LISTEN statement takes them all)."""
        for qs in self.queues.values():
            self.waiters.append(hub.waiter(JOBS_CHANNEL, qs.name, on_wake=qs.wake.set, start=False))
        # A hold or a release (issue 28): the worker's copy of the holds is stale, and every
        # fetcher claims again at once (a release must not wait for the poll).
        self.waiters.append(hub.waiter(PAUSES_CHANNEL, "*", on_wake=self.wake_all, start=False))

    def wake_all(self) -> None:
        self.holds.invalidate()
        for qs in self.queues.values():
            qs.wake.set()
            # A fetcher whose slots are all busy waits on slot_freed: it re-reads the
            # holds now too (a live slot change, see Worker.apply_slots).
            qs.slot_freed.set()

    def close(self) -> None:
        for w in self.waiters:
            w.close()
        self.waiters = []
