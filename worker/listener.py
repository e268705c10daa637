"""The listener: ``LISTEN opsboard_jobs`` on a connection of its own, waking
the fetcher of the queue a notification names.  Fetchers also poll, so a lost
listener only makes pick-up slower, never stops it."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import psycopg

from opsboard.schema import JOBS_CHANNEL

if TYPE_CHECKING:
    from .runner import Worker

log = logging.getLogger("worker")


class Listener:
    def __init__(self, worker: "Worker"):
        self.worker = worker

    def run(self) -> None:
        w = self.worker
        failures = 0
        while not w.stopping.is_set():
            try:
                conn = psycopg.connect(w.url, autocommit=True, connect_timeout=2)
            except psycopg.Error as exc:
                failures += 1
                w.db_trouble(exc, "listener")
                w.stopping.wait(w.retry_delay(failures))
                continue
            failures = 0
            w.db_ok()  # the listener probes at most a second apart: often the first to see the return
            try:
                conn.execute(f"LISTEN {JOBS_CHANNEL}")
                # Anything enqueued while we were not listening: look once.
                for qs in w.queues.values():
                    qs.wake.set()
                while not w.stopping.is_set():
                    for n in conn.notifies(timeout=0.5):
                        qs = w.queues.get(n.payload)
                        if qs is not None:
                            qs.wake.set()
            except psycopg.Error as exc:
                w.db_trouble(exc, "listener")
                w.stopping.wait(w.retry_delay(1))
            finally:
                conn.close()


