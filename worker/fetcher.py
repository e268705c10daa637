"""The fetcher: one claim loop per queue, feeding that queue's slots.

It claims ``min(free slots, CLAIM_BATCH_MAX)`` jobs in one short transaction,
round-robin over tenants, and sleeps until a slot frees, a notification wakes
it (see :mod:`worker.listener`), or the poll interval passes.
"""
from __future__ import annotations

import logging
import queue as queue_mod
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg

from opsboard import queue

if TYPE_CHECKING:
    from .runner import Worker

log = logging.getLogger("worker")

#: Jobs claimed in one statement at most.
CLAIM_BATCH_MAX = 200


@dataclass
class QueueState:
    """One queue's slots and claim cursor, shared by its fetcher, slots and the keeper."""

    name: str
    slots: int
    work: queue_mod.SimpleQueue = field(default_factory=queue_mod.SimpleQueue)
    wake: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    #: Round-robin cursor over tenants (see opsboard.queue.claim).
    after_tenant: uuid.UUID = queue.ZERO_TENANT
    lock: threading.Lock = field(default_factory=threading.Lock)
    slot_freed: threading.Event = field(default_factory=threading.Event)
    threads: list = field(default_factory=list)
    #: Retired slot threads whose handler is still running past its timeout.
    abandoned: int = 0
    #: At most this many abandoned threads get a replacement slot (default: one per slot);
    #: beyond it, a timed-out slot stays taken until its handler returns.
    abandoned_max: int = -1

    def __post_init__(self):
        if self.abandoned_max < 0:
            self.abandoned_max = self.slots

    def free(self) -> int:
        with self.lock:
            return self.slots - self.in_flight


class Fetcher:
    """Claims jobs for one queue while the worker runs."""

    def __init__(self, worker: "Worker", qs: QueueState):
        self.worker, self.qs = worker, qs

    def run(self) -> None:
        w, qs = self.worker, self.qs
        failures = 0
        while not w.stopping.is_set():
            free = qs.free()
            if free <= 0:
                qs.slot_freed.wait(w.config.poll_interval)
                qs.slot_freed.clear()
                continue
            qs.wake.clear()
            try:
                with w.pool.connection() as conn:
                    claimed = queue.claim(conn, qs.name, w.id, min(free, CLAIM_BATCH_MAX), w.lease,
                                          after_tenant=qs.after_tenant)
                rows, qs.after_tenant = claimed.rows, claimed.next_after_tenant
                failures = 0
                w.db_ok()
            except psycopg.Error as exc:
                failures += 1
                w.db_trouble(exc, f"claim on {qs.name}")
                w.stopping.wait(w.retry_delay(failures))
                continue
            if not rows:
                qs.wake.wait(w.config.poll_interval)
                continue
            if w.stopping.is_set():
                for row in rows:
                    w.executor.release(row, "shutdown")
                return
            with qs.lock:
                qs.in_flight += len(rows)
            for row in rows:
                qs.work.put(row)
