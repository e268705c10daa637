"""The fetcher: one claim loop per queue, feeding that queue's slots.

It claims in one short transaction, round-robin over tenants, and sleeps until
a slot frees, a notification wakes it (see :mod:`worker.listener`), or the
poll interval passes.

A worker claims only what it can start now (issue 50): a claim asks for the
free slots, plus a small buffer sized from the rate at which this queue's slots
actually took jobs in the last moments (:meth:`QueueState.capacity`: what they
take in :data:`BUFFER_SECONDS`, at most :data:`PREFETCH_MAX`), so that a
worker with few slots and quick jobs still claims in bulk.  While slots are
held by slow jobs that rate falls to nothing and so does the buffer: no claimed
job waits behind a slow one.  When slots stall with jobs buffered, the fetcher
hands them back (released, attempt not counted) once no slot took a job for
:data:`HANDBACK_SECONDS` (:meth:`Fetcher.hand_back_stale`), for any worker with
a free slot.  (It used to buffer up to a quarter second's worth by the
handlers' average duration: with one tenant's 9.5 s webhooks holding the slots,
up to 28 jobs were ``running`` for 16 slots, healthy ones among them.)

A job found in the buffer past a share of its lease when a slot takes it is
released, not run (see :meth:`worker.executor.Executor.run_job`).  Shutdown
releases the buffer at once; so does the supervisor when a worker process dies
(it tells buffered jobs from running ones by :mod:`worker.running_file`).

Each worker starts its tenant walk at its own point (a hash of its id), so
that with more tenants than a claim visits, workers do not all claim from
the same tenants' heads.
"""
from __future__ import annotations

import logging
import queue as queue_mod
import hashlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import psycopg

from opsboard import db, jobqueue, jobtypes, pauses

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from .parts import ClaimedJobs, OutageLog

log = logging.getLogger("worker")

#: Jobs claimed in one statement at most.
CLAIM_BATCH_MAX = 200
#: The first wait after a claim that found due jobs but got none (other workers had them
#: all), doubled while that goes on, up to the poll interval.
CONTENDED_WAIT = 0.001
#: Jobs claimed beyond the free slots at most (the buffer), per queue.
PREFETCH_MAX = 2 * CLAIM_BATCH_MAX
#: A buffered job should start within this fraction of the lease.
PREFETCH_LEASE_SHARE = 0.25
#: The buffer holds what the slots took in this many seconds lately (their measured take rate):
#: it only has to cover a claim's round trip.
BUFFER_SECONDS = 0.002
#: Buffered jobs are handed back once no slot took a job for this long (the slots stalled on slow jobs).
HANDBACK_SECONDS = 0.005
#: The take rate is measured over windows of at least this long.
RATE_WINDOW = 0.02


class HoldsCache:
    """This worker's copy of the holds in force (:class:`opsboard.pauses.Holds`), shared by its fetchers.

    Re-read on the claim's own connection when the hub delivered an
    ``opsboard_pauses`` notification (:meth:`invalidate`) and at least every
    ``max_age`` seconds (the poll fallback while the hub is down), so that a
    hold binds every worker within a second of its commit, and a worker started
    later reads the holds before its first claim.  (The claim statement takes
    the holds as parameters: reading the table inside it cost a large share of
    the claim throughput.)
    """

    def __init__(self, max_age: float = 1.0):
        self.max_age = max_age
        self._lock = threading.Lock()
        self._holds = None
        self._read_at = float("-inf")
        self._generation = 0
        #: (holds, their limited tenants): see limited_tenants.
        self._limited_tenants: tuple = (None, frozenset())

    def limited_types(self) -> frozenset[str]:
        """Types an operator limited live (directly or through their provider), from the last read:
        a job of one of them ending may make room for another (see Executor.frees_others)."""
        holds = self._holds
        if holds is None or not holds.limit_overrides:
            return frozenset()
        names, provs = jobtypes.provider_types()
        providers = {t for k, t, _ in holds.limit_overrides if k == "provider"}
        return frozenset({t for k, t, _ in holds.limit_overrides if k in ("type", "key")}
                         | {n for n, p in zip(names, provs) if p in providers})

    def limited_tenants(self) -> frozenset:
        """Tenants with a concurrency limit, from the last read: one of their jobs ending may make room.

        Asked once per finished job (Executor.frees_others): built once per read of the holds."""
        holds = self._holds
        if holds is None:
            return frozenset()
        cached = self._limited_tenants
        if cached[0] is not holds:
            cached = self._limited_tenants = (holds, frozenset(t for t, _ in holds.tenant_limits))
        return cached[1]

    def fresh(self) -> "pauses.Holds | None":
        """The copy, if it is fresh enough to use without a read (else ``None``)."""
        with self._lock:
            if self._holds is not None and time.monotonic() - self._read_at < self.max_age:
                return self._holds
        return None

    def invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._read_at = float("-inf")

    def get(self, conn) -> "pauses.Holds":
        with self._lock:
            if self._holds is not None and time.monotonic() - self._read_at < self.max_age:
                return self._holds
            generation = self._generation
        started = time.monotonic()
        holds = pauses.read_holds(conn)
        with self._lock:
            # A notification that arrived during the read leaves the copy stale: read again next time.
            if generation == self._generation:
                self._holds, self._read_at = holds, started
            return holds


def walk_origin(worker_id: str) -> uuid.UUID:
    """Where this worker's tenant walk starts: a stable hash of its id."""
    return uuid.UUID(bytes=hashlib.blake2b(worker_id.encode(), digest_size=16).digest())


@dataclass
class QueueState:
    """One queue's slots and claim cursor, shared by its fetcher, slots and the keeper."""

    name: str
    slots: int
    work: queue_mod.SimpleQueue = field(default_factory=queue_mod.SimpleQueue)
    wake: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    #: Round-robin cursor over tenants (see opsboard.jobqueue.claim).
    after_tenant: uuid.UUID = jobqueue.ZERO_TENANT
    #: The next claim takes the limit locks first (the last one's ``locked_next``).
    locked_first: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    slot_freed: threading.Event = field(default_factory=threading.Event)
    #: A slot that frees its job wakes the fetcher (``slot_freed``) only once
    #: ``in_flight`` is down to this: the fetcher sets it, from its refill rule,
    #: each time it goes to sleep for want of room (a huge value: wake at every free).
    refill_at: int = 1 << 62
    threads: list = field(default_factory=list)
    #: Retired slot threads whose handler is still running past its timeout.
    abandoned: int = 0
    #: At most this many abandoned threads get a replacement slot (default: one per slot);
    #: beyond it, a timed-out slot stays taken until its handler returns.
    abandoned_max: int = -1
    #: Handler duration, seconds (moving average of this worker's runs); ``None`` until one ran.
    avg_seconds: float | None = None
    #: Jobs the slots took from ``work`` (a racy count: an estimate), and when the last one was taken
    #: (monotonic): the fetcher's measure of how fast the slots turn over (see capacity).
    taken: int = 0
    last_take: float = 0.0
    #: Slots running a job now (taken and not yet freed; under ``lock``).
    busy: int = 0
    #: Jobs per second the slots took over the last measured window (the fetcher keeps it).
    take_rate: float = 0.0

    def __post_init__(self):
        if self.abandoned_max < 0:
            self.abandoned_max = self.slots

    def free(self) -> int:
        with self.lock:
            return self.slots - self.in_flight

    def capacity(self, lease: float) -> int:
        """Jobs this queue may hold (running + buffered): the slots plus a buffer of what the slots
        took in :data:`BUFFER_SECONDS` at their measured rate (none while they are held by slow jobs),
        bounded by :data:`PREFETCH_MAX` and by a share of the lease at the handlers' average duration."""
        rate = self.take_rate
        if rate <= 0.0:
            return self.slots
        buffered = rate * BUFFER_SECONDS
        avg = self.avg_seconds
        if avg is not None:
            buffered = min(buffered, lease * PREFETCH_LEASE_SHARE * self.slots / max(avg, 1e-4))
        return self.slots + int(min(PREFETCH_MAX, buffered))

    def claim_room(self, cap: int) -> int:
        """Free room at which the fetcher claims again: a full claim's worth once
        the buffer holds more than one claim, else half the buffer; without a
        buffer, one free slot."""
        return max(1, min(CLAIM_BATCH_MAX, (cap - self.slots) // 2))

    def observe(self, seconds: float) -> None:
        """Fold one handler run's duration into :attr:`avg_seconds` (no lock: a racy average is fine)."""
        avg = self.avg_seconds
        self.avg_seconds = seconds if avg is None else avg + (seconds - avg) * 0.05


class Fetcher:
    """Claims jobs for one queue while the worker runs.

    Its collaborators: the queue's state ``qs`` (shared with its slots and the keeper); the
    ``executor`` its claimed rows go to (prepared, or released when the worker stops); the
    worker's ``pool`` and ``holds``; ``keeping_up`` (the completer's: whether to prefetch);
    ``apply_slots`` (the runtime's, called with every read of the holds: an operator's live
    slot change); the ``outages`` log; the ``stopping`` event; the ``quiet`` event (set: claim
    nothing, see :mod:`worker.commands`); and the claim's settings (``worker_id``, ``lease``,
    ``poll_interval``).
    """

    def __init__(self, qs: QueueState, executor: "ClaimedJobs", *, pool: "ConnectionPool", holds: HoldsCache,
                 keeping_up: Callable[[], bool], apply_slots: Callable[["pauses.Holds"], None],
                 outages: "OutageLog", stopping: threading.Event, worker_id: str, lease: float,
                 poll_interval: float, quiet: threading.Event | None = None):
        self.qs, self.executor = qs, executor
        self.quiet = quiet if quiet is not None else threading.Event()
        self.pool, self.holds = pool, holds
        self.keeping_up, self.apply_slots = keeping_up, apply_slots
        self.outages, self.stopping = outages, stopping
        self.worker_id, self.lease, self.poll_interval = worker_id, lease, poll_interval
        if qs.after_tenant == jobqueue.ZERO_TENANT:
            qs.after_tenant = walk_origin(worker_id)
        #: The claims' connection, kept while this queue has work (given back when a claim comes
        #: back empty): one connection prepares and plans the claim, not every one of the pool.
        self.kept = db.KeptConnection(pool)
        #: When the last claim that got jobs came back (monotonic), and the take-rate window's start.
        self.last_claim = 0.0
        self._rate_at, self._rate_taken = time.monotonic(), 0
        #: Jobs handed back unstarted so far (see hand_back_stale).
        self.handed_back = 0

    def measure_rate(self, now: float) -> None:
        """Fold the slots' takes since the window's start into ``qs.take_rate`` once the window is long enough."""
        qs = self.qs
        dt = now - self._rate_at
        if dt >= RATE_WINDOW:
            taken = qs.taken
            qs.take_rate = max(0, taken - self._rate_taken) / dt
            self._rate_at, self._rate_taken = now, taken

    def hand_back_stale(self, now: float) -> int:
        """Release the buffered jobs once no slot took one for :data:`HANDBACK_SECONDS` since the last
        claim: the slots are held (by slow jobs), and another worker may have a free one.  Each was
        buffered at least that long; the attempt is not counted.  Returns how many were handed back.

        Only while every slot is busy: a free slot that merely has not been scheduled yet (two cores,
        many processes) takes its job soon enough."""
        qs = self.qs
        if qs.busy < qs.slots or now - max(qs.last_take, self.last_claim) < HANDBACK_SECONDS:
            return 0
        rows, stops = [], 0
        while True:
            try:
                item = qs.work.get_nowait()
            except queue_mod.Empty:
                break
            if item is None:   # a slot's stop signal (shutdown, fewer slots): it stays
                stops += 1
            else:
                rows.append(item)
        for _ in range(stops):
            qs.work.put(None)
        if not rows:
            return 0
        for row in rows:
            self.executor.release(row, "handed_back")
        with qs.lock:
            qs.in_flight -= len(rows)
        # The slots are stalled: no buffer until they take jobs again.
        qs.take_rate = 0.0
        self._rate_at, self._rate_taken = now, qs.taken
        self.handed_back += len(rows)
        log.debug("handed back %d buffered job(s) of %s: every slot busy", len(rows), qs.name)
        return len(rows)

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.kept.release()

    def _run(self) -> None:
        qs, holds, stopping, outages = self.qs, self.holds, self.stopping, self.outages
        failures = 0
        contended = 0.0  # the wait after the last claim that other workers' claims left empty
        while not stopping.is_set():
            if self.quiet.is_set():
                # Quieted on the Workers page: what is held runs on, nothing more is claimed.  The
                # watcher's un-quiet wakes every fetcher (qs.wake) to claim again at once.
                self.kept.release()
                qs.wake.wait(self.poll_interval)
                qs.wake.clear()
                continue
            now = time.monotonic()
            self.measure_rate(now)
            if not qs.work.empty():
                self.hand_back_stale(now)
            keeping_up = self.keeping_up()
            with qs.lock:
                cap = qs.capacity(self.lease) if keeping_up else qs.slots
                free = cap - qs.in_flight
                # Refill in whole claims (a claim per freed slot would be a
                # round trip per job; see QueueState.claim_room).
                need = qs.claim_room(cap)
                if free < need:
                    # Sleep until that much is free.  While the completer lags,
                    # every free wakes us instead: the buffer may come back as
                    # soon as it catches up.
                    qs.refill_at = cap - need if keeping_up else 1 << 62
            if free < need:
                # Every slot busy: an operator's slot change (issue 28) must still reach this
                # queue within a second, so the holds are re-read here too when stale.
                if holds.fresh() is None:
                    try:
                        with self.pool.connection() as conn:
                            self.apply_slots(holds.get(conn))
                    except psycopg.Error as exc:
                        outages.trouble(exc, f"holds read on {qs.name}")
                # With jobs buffered, wake in time to hand them back should no slot take them.
                qs.slot_freed.wait(min(self.poll_interval, holds.max_age,
                                       HANDBACK_SECONDS if not qs.work.empty() else holds.max_age))
                qs.slot_freed.clear()
                continue
            qs.wake.clear()
            try:
                with self.kept.connection() as conn:
                    in_force = holds.get(conn)
                    self.apply_slots(in_force)
                    claimed = jobqueue.claim(conn, qs.name, self.worker_id, min(free, CLAIM_BATCH_MAX), self.lease,
                                             after_tenant=qs.after_tenant, holds=in_force,
                                             locked_first=qs.locked_first)
                rows, qs.after_tenant, qs.locked_first = claimed.rows, claimed.next_after_tenant, claimed.locked_next
                failures = 0
                outages.ok()
            except psycopg.Error as exc:
                failures += 1
                outages.trouble(exc, f"claim on {qs.name}")
                stopping.wait(outages.retry_delay(failures))
                continue
            if not rows:
                if claimed.contended:
                    # Due jobs, all held or taken by other workers' claims: theirs end within
                    # milliseconds, and what they leave is ours.  Waiting for an enqueue's
                    # notification instead left this worker idle while another drained the
                    # queue alone (`opsboard bench --peers`: nearly every job went to one worker).
                    contended = min(contended * 2 or CONTENDED_WAIT, self.poll_interval)
                    qs.wake.wait(contended)
                    continue
                contended = 0.0
                self.kept.release()
                qs.wake.wait(self.poll_interval)
                continue
            contended = 0.0
            if stopping.is_set():
                for row in rows:
                    self.executor.release(row, "shutdown")
                return
            claimed_at = self.last_claim = time.monotonic()
            self.executor.prepare(rows)
            with qs.lock:
                qs.in_flight += len(rows)
            for row in rows:
                row["claimed_mono"] = claimed_at
                qs.work.put(row)
