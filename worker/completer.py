"""The completer: writes outcomes in batches and flushes per-minute statistics.

One statement per batch (``unnest`` arrays, fenced by ``(locked_by,
attempts)``).  The queue between the slots and the completer is bounded
(:data:`OUTCOME_QUEUE_MAX`): when the database is slow, slots wait to hand
over their outcome, so they are not freed and the fetcher claims nothing more,
instead of memory growing with finished-but-unrecorded jobs.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import queue as queue_mod
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import psycopg
from psycopg.types.json import Jsonb

from opsboard import db, jobqueue, retry
from opsboard.storable import storable
from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from .fetcher import QueueState
    from .parts import Lifecycle, OutageLog

log = logging.getLogger("worker")

#: Outcomes written in one statement at most.
COMPLETE_BATCH_MAX = 1000
#: Outcomes waiting for the completer at most; a slot with one more waits.
OUTCOME_QUEUE_MAX = 1000
#: Seconds between statistics flushes.
STATS_FLUSH_SECONDS = 2.0


#: The job_stats counter of each outcome kind (``released`` is not a statistic).
_COUNTERS = {"succeeded": "succeeded", "retryable": "retried", "dead": "dead", "snoozed": "snoozed"}


class Stats:
    """Per-minute counters, flushed to job_stats in one statement."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows: dict[tuple, dict] = {}

    def add(self, queue_name: str, type_: str, kind: str, duration_ms: int, at: datetime | None = None) -> None:
        self.add_many([(queue_name, type_, kind, duration_ms)], at)

    def add_many(self, outcomes, at: datetime | None = None) -> None:
        """:meth:`add` for many ``(queue, type, kind, duration_ms)`` of the same minute:
        one clock read and one lock for a whole batch of outcomes."""
        minute = (at or datetime.now(timezone.utc)).replace(second=0, microsecond=0)
        with self.lock:
            rows = self.rows  # inside the lock: take() swaps it
            for queue_name, type_, kind, duration_ms in outcomes:
                counter = _COUNTERS.get(kind)
                if counter is None:
                    continue
                row = rows.get((minute, queue_name, type_))
                if row is None:
                    row = rows[(minute, queue_name, type_)] = {
                        "succeeded": 0, "retried": 0, "dead": 0, "snoozed": 0, "duration_ms_sum": 0,
                        "duration_hist": [0] * (len(DURATION_BUCKETS_MS) + 1)}
                row[counter] += 1
                row["duration_ms_sum"] += duration_ms
                row["duration_hist"][bucket_index(duration_ms)] += 1

    def take(self, worker_id: str) -> list[dict]:
        with self.lock:
            rows, self.rows = self.rows, {}
        return [{"minute": k[0].isoformat(), "worker_id": worker_id, "queue": k[1], "type": k[2], **v}
                for k, v in rows.items()]

    def put_back(self, rows: list[dict]) -> None:
        """Keep rows whose flush failed for the next one."""
        with self.lock:
            for r in rows:
                key = (datetime.fromisoformat(r["minute"]), r["queue"], r["type"])
                mine = self.rows.get(key)
                if mine is None:
                    self.rows[key] = {k: v for k, v in r.items() if k not in ("minute", "worker_id", "queue", "type")}
                    continue
                for k in ("succeeded", "retried", "dead", "snoozed", "duration_ms_sum"):
                    mine[k] += r[k]
                mine["duration_hist"] = [a + b for a, b in zip(mine["duration_hist"], r["duration_hist"])]


class OutcomeQueue:
    """The bounded queue between the slots and the completer.

    What :class:`queue.Queue` does here, for less per job: one lock per
    ``put``, the completer woken only when it waits for work, and everything
    waiting taken in one call (:meth:`take`).  A ``put`` into a full queue
    waits for room (the back-pressure that holds the slots, hence the
    claims, back while the database is slow), up to ``timeout``.
    """

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._getters = 0
        self._putters = 0

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        """Append ``item``; while full, wait (``block``) up to ``timeout`` seconds, else :class:`queue.Full`."""
        with self._lock:
            if len(self._items) >= self.maxsize:
                if not block:
                    raise queue_mod.Full
                deadline = None if timeout is None else time.monotonic() + timeout
                self._putters += 1
                try:
                    while len(self._items) >= self.maxsize:
                        if deadline is None:
                            self._not_full.wait()
                            continue
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise queue_mod.Full
                        self._not_full.wait(left)
                finally:
                    self._putters -= 1
            self._items.append(item)
            if self._getters:
                self._not_empty.notify()

    def take(self, most: int, timeout: float) -> list:
        """Up to ``most`` items, oldest first, waiting up to ``timeout`` seconds
        for the first; ``[]`` when none came."""
        with self._lock:
            if not self._items:
                self._getters += 1
                try:
                    self._not_empty.wait(timeout)
                finally:
                    self._getters -= 1
            items = self._items
            n = min(most, len(items))
            batch = [items.popleft() for _ in range(n)]
            if n and self._putters:
                self._not_full.notify(n)
            return batch


#: The error code of a job whose outcome the database refused to store (its text, a constraint).
UNSTORABLE_CODE = "outcome_unstorable"
#: Backoff of a job whose outcome was refused, before its next attempt (seconds: base, cap).
REFUSED_BACKOFF_BASE = 5.0
REFUSED_BACKOFF_CAP = 600.0


class OutcomeRefused(Exception):
    """The database refused a batch of outcomes for its data (not for being away): ``cause`` says why."""

    def __init__(self, cause: BaseException):
        super().__init__(type(cause).__name__)
        self.cause = cause


class Completer:
    """Records the outcomes the slots hand over, in batches.

    Its collaborators: the worker's ``pool``, its ``queues`` (whose fetchers a finished group or
    limited job wakes), its ``lifecycle`` and ``outages`` log, and the ``worker_id`` the outcomes
    are fenced by."""

    def __init__(self, pool: "ConnectionPool", *, queues: dict[str, "QueueState"], lifecycle: "Lifecycle",
                 outages: "OutageLog", worker_id: str, maxsize: int | None = None):
        self.pool, self.queues, self.worker_id = pool, queues, worker_id
        self.lifecycle, self.outages = lifecycle, outages
        self.outcomes = OutcomeQueue(maxsize or OUTCOME_QUEUE_MAX)
        self.stats = Stats()
        self.done = threading.Event()
        #: Outcomes taken from the queue and not yet written (for shutdown's report).
        self.writing = 0
        #: ``time.monotonic()`` when the write in progress began (``None`` between
        #: writes) and when the last one succeeded (0: none yet).
        self.write_started: float | None = None
        self.last_written = 0.0
        #: The outcome writes' connection, kept while outcomes keep coming (see db.KeptConnection).
        self.kept = db.KeptConnection(pool)

    def keeping_up(self, slow: float = 0.25) -> bool:
        """Whether outcomes are being recorded promptly: one write succeeded, the
        one in progress (if any) is younger than ``slow`` seconds, and the queue
        is less than half full.  The fetchers prefetch only then, so that a slow
        database still holds back the claims (the slots wait to hand over)."""
        started = self.write_started
        return (self.last_written > 0 and (started is None or time.monotonic() - started < slow)
                and self.outcomes.qsize() * 2 < self.outcomes.maxsize)

    def submit(self, item: tuple, *, block: bool = True, timeout: float | None = None) -> bool:
        """Queue ``(OutcomeRecord, queue, type, frees_others)``; a slot waits while the queue is full.

        With ``block=False`` (shutdown), an outcome that does not fit is left to
        the lease reaper; returns whether it was queued.
        """
        try:
            self.outcomes.put(item, block=block, timeout=timeout)
            return True
        except queue_mod.Full:
            log.warning("outcome queue full: job %s left to the lease reaper", item[0].job_id)
            return False

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.kept.release()

    def _run(self) -> None:
        last_stats = time.monotonic()
        while True:
            batch = self.outcomes.take(COMPLETE_BATCH_MAX, timeout=0.2)
            if not batch:
                self.kept.release()
            if batch:
                self.writing = len(batch)
                self.write_started = time.monotonic()
                try:
                    self.write_outcomes(batch)
                except Exception:  # noqa: BLE001 - a bug here must not stop the worker: the reaper recovers
                    log.exception("recording %d outcome(s) failed; the lease reaper will recover those jobs",
                                  len(batch))
                self.write_started = None
                self.writing = 0
            if time.monotonic() - last_stats > STATS_FLUSH_SECONDS or (self.lifecycle.stopped.is_set() and not batch):
                self.flush_stats()
                last_stats = time.monotonic()
            if self.lifecycle.stopped.is_set() and not batch and self.outcomes.empty():
                self.flush_stats()
                self.done.set()
                return

    def write_outcomes(self, batch) -> None:
        """Record a batch; then wake the claimers a finished group or limited job may unblock.

        One outcome the database refuses never holds back the others: the batch is then written one
        by one, and each refused outcome becomes a failure of its own job (:meth:`write_refused`)."""
        records = [b[0] for b in batch]
        unrecorded = 0
        failed: dict = {}  # job id -> the kind recorded in place of a refused outcome
        try:
            applied = self.write_records(records)
        except OutcomeRefused as refused:
            if len(records) == 1:
                applied = self.write_refused(records[0], refused.cause, failed)
                unrecorded += applied is None
            else:
                log.warning("recording %d outcomes was refused (%s); writing them one by one",
                            len(records), type(refused.cause).__name__)
                applied = set()
                for rec in records:
                    try:
                        got = self.write_records([rec], tries=2)
                    except OutcomeRefused as one:
                        got = self.write_refused(rec, one.cause, failed)
                        unrecorded += got is None
                    applied |= got or set()
        if applied is None:
            log.error("gave up recording %d outcome(s); the reaper will recover those jobs", len(records))
            return
        self.last_written = time.monotonic()
        wake = set()
        done = []
        for rec, queue_name, type_, frees_others in batch:
            if rec.job_id in applied:
                done.append((queue_name, type_, failed.get(rec.job_id, rec.kind), rec.duration_ms))
                if frees_others:
                    wake.add(queue_name)
        self.stats.add_many(done)
        if wake:
            # A finished job of a group or of a limited type can let another one
            # start, which no enqueue would announce: wake every worker's claimer.
            for name in wake:
                if name in self.queues:
                    self.queues[name].wake.set()
            try:
                with self.pool.connection() as conn:
                    db.execute(conn, "job_notify_queues", {"queues": sorted(wake)})
            except psycopg.Error as exc:
                log.warning("wake-up notification failed (%s); workers will poll", type(exc).__name__)
        lost = len(records) - len(applied) - unrecorded
        if lost:
            log.warning("%d outcome(s) not applied: lease lost or job reclaimed", lost)

    def write_records(self, records, tries: int = 8) -> set | None:
        """Write outcomes; ``None`` when still failing after ``tries`` once stopping.

        A database that cannot take the write now (away, read-only, a lock or statement timeout:
        :func:`opsboard.db.unavailable`) is waited for, one log line per fault; anything else is
        the data refused (retrying will not help): :class:`OutcomeRefused`."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.kept.connection() as conn:
                    return jobqueue.record_outcomes(conn, self.worker_id, records)
            except psycopg.Error as exc:
                if not db.unavailable(exc):
                    raise OutcomeRefused(exc) from exc
                # Wait for the database while the worker runs (the bounded queue
                # holds the slots back meanwhile); once stopping, give up after
                # ``tries`` and leave the jobs to the reaper.
                self.outages.trouble(exc, f"recording {len(records)} outcome(s)")
                if self.lifecycle.stopping.is_set() and (
                        attempt >= tries or time.monotonic() >= (self.lifecycle.shutdown_deadline or 0) - 1.0):
                    return None
                time.sleep(self.outages.retry_delay(attempt))
            except Exception as exc:  # noqa: BLE001 - e.g. a value psycopg cannot dump: this data, not the worker
                raise OutcomeRefused(exc) from exc

    def write_refused(self, rec, cause: BaseException, failed: dict) -> set | None:
        """Record a failure of ``rec``'s job in place of the outcome the database refused.

        The failure counts an attempt like any other (retried with backoff while attempts are left,
        then dead), with the code ``outcome_unstorable`` and a detail saying what was refused and
        why (the exception's class: its message may hold the very text refused).  Returns the ids
        applied (empty: the job is no longer this worker's), or ``None`` when even that failed (the
        lease reaper recovers the job); ``failed[job id]`` is set to the kind recorded."""
        reason = type(cause).__name__
        try:
            with self.kept.connection() as conn:
                held = db.one(conn, "job_held_attempts", {"id": rec.job_id, "worker": self.worker_id, "token": rec.token})
                if held is None:
                    return set()
                last = rec.kind == "dead" or held["attempts"] >= held["max_attempts"]
                failure = dataclasses.replace(
                    rec, kind="dead" if last else "retryable",
                    delay=0.0 if last else retry.backoff(held["attempts"], REFUSED_BACKOFF_BASE, REFUSED_BACKOFF_CAP),
                    code=UNSTORABLE_CODE, has_effects=False,
                    detail=f"The database refused to store this attempt's {rec.kind} outcome "
                           f"({storable(rec.code, 'a refused outcome code') or 'no code'}): {reason}.")
                applied = jobqueue.record_outcomes(conn, self.worker_id, [failure])
                failed[rec.job_id] = failure.kind
        except Exception as exc:  # noqa: BLE001 - the completer goes on whatever one job's outcome does
            log.error("job %s: its %s outcome was refused (%s) and recording the failure failed too (%s); "
                      "the lease reaper will recover it", rec.job_id, rec.kind, reason, type(exc).__name__,
                      extra={"job_id": rec.job_id})
            return None
        log.error("job %s: the database refused its %s outcome (%s); recorded as %s (%s)", rec.job_id, rec.kind,
                  reason, failure.kind, UNSTORABLE_CODE, extra={"job_id": rec.job_id})
        return applied

    def flush_stats(self) -> int:
        """Add this worker's pending per-minute counters to ``job_stats``; returns rows written."""
        rows = self.stats.take(self.worker_id)
        if not rows:
            return 0
        try:
            with self.pool.connection() as conn:
                db.execute(conn, "job_stats_add", {"rows": Jsonb(rows)})
            return len(rows)
        except psycopg.Error as exc:
            log.warning("stats flush failed (%s); kept for the next one", type(exc).__name__)
            self.stats.put_back(rows)
            return 0
