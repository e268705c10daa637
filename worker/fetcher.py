"""The fetcher: one claim loop per queue, feeding that queue's slots.

It claims up to ``CLAIM_BATCH_MAX`` jobs in one short transaction, round-robin
over tenants, and sleeps until a slot frees, a notification wakes it (see
:mod:`worker.listener`), or the poll interval passes.

A claim is not capped by the free slots: the queue keeps a bounded prefetch
buffer (:meth:`QueueState.capacity`), so a worker with 8 slots still claims
in bulk.  Prefetched jobs are leased from their claim, so the buffer is sized
from the handlers' measured duration: a buffered job is expected to start
within a quarter of the lease and a quarter of a second (so that slow jobs are
not hoarded away from other workers) (a job found past that when a slot takes it is
released, not run; see :meth:`worker.executor.Executor.run_job`), and only
while the completer keeps up (a slow database still holds the claims back).
Shutdown releases the buffer at once; so does the supervisor when a worker
process dies (it tells buffered jobs from running ones by
:mod:`worker.running_file`); an unsupervised worker's buffer comes back with
its lease, like its running jobs.

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
#: Jobs claimed beyond the free slots at most (the prefetch buffer), per queue:
#: two claims' worth, so that a full claim can be in flight while the slots
#: still have a claim's worth to run (with one, the slots ran dry during every
#: claim and claims came back half full).
PREFETCH_MAX = 2 * CLAIM_BATCH_MAX
#: A buffered job should start within this fraction of the lease.
PREFETCH_LEASE_SHARE = 0.25
#: ... and within this many seconds: the buffer only has to cover a claim's
#: round trip, and a worker that buffered minutes of slow jobs would leave
#: nothing for the workers beside it (or for one that starts later).
PREFETCH_SECONDS = 0.25


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
        return frozenset({t for k, t, _ in holds.limit_overrides if k == "type"}
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

    def __post_init__(self):
        if self.abandoned_max < 0:
            self.abandoned_max = self.slots

    def free(self) -> int:
        with self.lock:
            return self.slots - self.in_flight

    def capacity(self, lease: float) -> int:
        """Jobs this queue may hold (running + buffered): the slots plus a prefetch
        buffer that the slots are expected to drain within a share of the lease
        and within :data:`PREFETCH_SECONDS`."""
        avg = self.avg_seconds
        if avg is None:  # nothing measured yet: claim for the free slots only
            return self.slots
        drain = min(lease * PREFETCH_LEASE_SHARE, PREFETCH_SECONDS) * self.slots / max(avg, 1e-4)
        # Not capped by the slots: a worker with few slots still claims in
        # bulk.  A dying worker's buffered jobs cost little: its supervisor
        # releases unstarted jobs at once (worker.running_file), and the lease
        # bounds them otherwise (they drain within a share of it).
        return self.slots + int(min(PREFETCH_MAX, drain))

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
                qs.slot_freed.wait(min(self.poll_interval, holds.max_age))
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
            claimed_at = time.monotonic()
            self.executor.prepare(rows)
            with qs.lock:
                qs.in_flight += len(rows)
            for row in rows:
                row["claimed_mono"] = claimed_at
                qs.work.put(row)
