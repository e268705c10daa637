"""The keeper: handler timeouts, lease heartbeats and this worker's presence row.

Every 0.1 s it abandons handlers past their timeout (recording ``timeout``
and giving the queue a fresh slot, since a Python thread cannot be killed);
every ``lease / 3`` seconds (at most 10) it extends the leases of long-running
jobs in one statement and refreshes the worker's row in ``workers``.

It goes on through the shutdown grace (until the worker has stopped), and
beats once at once when the stop begins: a handler whose lease is gone (the
worker was paused past it) is told so then, instead of running on through the
grace, and the leases of handlers finishing in the grace are still extended.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

import psycopg
from psycopg.types.json import Jsonb

from opsboard import db, jobqueue, retry

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from .executor import Executor, Running, RunningJobs
    from .fetcher import QueueState
    from .parts import Lifecycle, OutageLog

log = logging.getLogger("worker")


class Keeper:
    """Enforces handler timeouts, extends the leases of long-running jobs, refreshes the worker's row.

    Its collaborators: the ``executor`` (to record a timeout and replace a slot), the
    ``running`` jobs, the ``queues`` (their abandoned threads, for the worker's row), the
    worker's ``pool``, ``lifecycle`` and ``outages`` log, ``is_leader`` (asked at each beat,
    for the worker's row), and the ``worker_id`` and ``lease`` its heartbeats hold the jobs by."""

    def __init__(self, executor: "Executor", running: "RunningJobs", queues: dict[str, "QueueState"], *,
                 pool: "ConnectionPool", lifecycle: "Lifecycle", outages: "OutageLog",
                 is_leader: Callable[[], bool], worker_id: str, lease: float):
        self.executor, self.running, self.queues = executor, running, queues
        self.pool, self.lifecycle, self.outages = pool, lifecycle, outages
        self.is_leader = is_leader
        self.worker_id, self.lease = worker_id, lease
        self.beat_every = max(0.5, min(lease / 3, 10.0))

    def run(self) -> None:
        stopping, stopped = self.lifecycle.stopping, self.lifecycle.stopped
        last_beat = 0.0
        beat_at_stop = False
        while not stopped.wait(0.1):
            now = time.monotonic()
            current = self.running.list()
            self.enforce_timeouts(current, now)
            stop_began = stopping.is_set() and not beat_at_stop
            if now - last_beat >= self.beat_every or stop_began:
                last_beat, beat_at_stop = now, beat_at_stop or stop_began
                try:
                    self.heartbeat(current)
                    self.outages.ok()
                except psycopg.Error as exc:
                    if not stopped.is_set():  # not the pools closing under it at the end
                        self.outages.trouble(exc, "heartbeat")

    def enforce_timeouts(self, current: list["Running"], now: float) -> int:
        """Record ``timeout`` for handlers past their deadline; returns how many."""
        executor = self.executor
        n = 0
        for r in current:
            if r.done or r.abandoned or not r.deadline or now <= r.deadline:
                continue
            n += 1
            r.abandoned = True
            cancelled = 0
            if r.ctx:
                r.ctx.cancelled.set()
                cancelled = r.ctx.cancel_queries()  # a query stuck in the server stops now
            log.warning("job timed out after %ss%s", r.jt.policy.timeout,
                        f"; cancelled {cancelled} running query" if cancelled else "",
                        extra={"job_id": r.row["id"], "job_type": r.row["type"]})
            executor.finish(r, retry.Unknown("timeout", f"handler ran past its {r.jt.policy.timeout}s timeout"),
                              timeout=1.0)
            if r.slot is None:
                continue
            # The hung thread cannot be killed: retire it and give the queue a
            # fresh slot, up to the queue's cap on abandoned threads.  Beyond
            # it the slot stays taken until its handler returns.
            qs = r.slot.qs
            with qs.lock:
                replace = qs.abandoned < qs.abandoned_max
                if replace:
                    qs.abandoned += 1
            if replace:
                r.slot.retired = True
                executor.spawn_slot(qs)
                executor.free_slot(r)
            else:
                log.warning("queue %s has %d abandoned handler threads (its cap): the slot stays taken "
                            "until its handler returns", qs.name, qs.abandoned, extra={"job_id": r.row["id"]})
        return n

    def heartbeat(self, current: list["Running"]) -> set:
        """Extend the leases of long-running jobs and refresh this worker's row; returns the ids kept."""
        lease = self.lease
        held = [(r.row["id"], r.row["attempts"]) for r in current
                if not r.done and not r.abandoned and r.jt
                and (r.jt.policy.long_running or r.jt.policy.timeout > lease / 2)]
        kept: set = set()
        with self.pool.connection() as conn:
            if held:
                kept = jobqueue.heartbeat(conn, self.worker_id, held, lease)
                for job_id, _ in held:
                    if job_id not in kept:
                        r = self.running.get(job_id)
                        if r and r.ctx:
                            r.ctx.cancelled.set()
                            log.warning("lease lost; the handler was asked to stop", extra={"job_id": job_id})
            db.execute(conn, "worker_heartbeat", {
                "id": self.worker_id, "state": "stopping" if self.lifecycle.stopping.is_set() else "running",
                "is_leader": self.is_leader(), "running_jobs": len(current),
                "abandoned": Jsonb({q.name: q.abandoned for q in self.queues.values()})})
        return kept

    def set_state(self, state: str, timeout: float = 2.0) -> None:
        with self.pool.connection(timeout=timeout) as conn:
            db.execute(conn, "worker_heartbeat", {
                "id": self.worker_id, "state": state, "is_leader": False, "running_jobs": len(self.running),
                "abandoned": None})
