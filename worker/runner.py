"""The worker process: claim loops, slots per queue, outcomes in batches, shutdown.

Threads, all daemon, in one process:

* one **fetcher** per queue claims ``min(free slots, batch max)`` jobs in one
  short transaction and hands them to that queue's slots;
* **slots** (``N`` threads per queue) run handlers; a queue's slots only ever
  run that queue's jobs, so ``critical`` keeps its capacity under any backlog;
* the **completer** writes outcomes in batches (one statement per batch,
  ``unnest`` arrays, fenced by ``(locked_by, attempts)``) and flushes stats;
* the **listener** holds ``LISTEN opsboard_jobs`` and wakes the fetcher of the
  queue named in a notification; fetchers also poll as a fallback;
* the **keeper** enforces handler timeouts, heartbeats the leases of
  long-running jobs and refreshes this worker's row in ``workers``;
* the **leader** holds an advisory lock and runs the maintenance services
  (reaper, expiry, pruner) while it does.

Shutdown (SIGTERM or SIGINT): stop claiming, give running handlers the grace
period, then release what is still running back to ``pending`` without
counting the attempt.  A second signal exits at once; leases cover the rest.
"""
from __future__ import annotations

import importlib
import logging
import os
import queue as queue_mod
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

import opsboard
from opsboard import jobtypes, queue, retry
from opsboard.backpressure import take_token
from opsboard.config import Config
from opsboard.db import connect
from opsboard.metrics import DURATION_BUCKETS_MS, bucket_index
from opsboard.schema import JOBS_CHANNEL

log = logging.getLogger("worker")

#: Jobs claimed in one statement at most.
CLAIM_BATCH_MAX = 200
#: Seconds a job of a type this worker does not know waits before it is offered again.
UNKNOWN_TYPE_SNOOZE = 60.0
#: Outcomes written in one statement at most.
COMPLETE_BATCH_MAX = 1000


@dataclass
class JobContext:
    """What a handler sees of its job."""

    id: uuid.UUID
    type: str
    version: int
    tenant_id: uuid.UUID
    queue: str
    payload: dict
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    group_key: str | None
    correlation_id: str | None
    event_id: Any
    expires_at: datetime | None
    worker_id: str
    pool: ConnectionPool
    #: Set when the lease was lost or the timeout passed: stop as soon as you can.
    cancelled: threading.Event = field(default_factory=threading.Event)
    has_effects: bool = False

    def connection(self):
        """A pooled autocommit connection for loading what the payload references."""
        return self.pool.connection()

    def effect_key(self) -> str:
        """The default effect key: tenant, type and idempotency key (else the job id)."""
        return f"{self.tenant_id}:{self.type}:{self.idempotency_key or self.id}"

    def begin_effect(self, provider: str, key: str | None = None) -> dict:
        """Record an external effect as started (see :func:`opsboard.queue.begin_effect`)."""
        self.has_effects = True
        with self.pool.connection() as conn:
            return queue.begin_effect(conn, key or self.effect_key(), {"id": self.id, "tenant_id": self.tenant_id},
                                      provider)

    def set_effect_ref(self, ref: str, key: str | None = None) -> None:
        """Remember the provider's reference for this job's started effect."""
        with self.pool.connection() as conn:
            queue.set_effect_ref(conn, key or self.effect_key(), {"id": self.id, "tenant_id": self.tenant_id}, ref)


@dataclass
class Running:
    row: dict
    jt: jobtypes.JobType | None
    ctx: JobContext | None = None
    started_mono: float = 0.0
    started_at: datetime | None = None
    deadline: float = 0.0
    done: bool = False
    #: The keeper or shutdown recorded an outcome for it; the handler's result is dropped.
    abandoned: bool = False
    slot: "Slot | None" = None
    #: The slot this job held was given back (once: by the handler's end or a timeout).
    freed: bool = False


class Slot(threading.Thread):
    def __init__(self, worker: "Worker", qs: "QueueState", n: int):
        super().__init__(name=f"slot-{qs.name}-{n}", daemon=True)
        self.worker, self.qs, self.retired = worker, qs, False

    def run(self) -> None:
        while not self.retired:
            item = self.qs.work.get()
            if item is None:
                return
            self.worker._run_job(item, self)


@dataclass
class QueueState:
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


class Stats:
    """Per-minute counters, flushed to job_stats in one statement."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows: dict[tuple, dict] = {}

    def add(self, queue_name: str, type_: str, kind: str, duration_ms: int) -> None:
        minute = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        with self.lock:
            row = self.rows.get((minute, queue_name, type_))
            if row is None:
                row = self.rows[(minute, queue_name, type_)] = {
                    "succeeded": 0, "retried": 0, "dead": 0, "snoozed": 0, "duration_ms_sum": 0,
                    "duration_hist": [0] * (len(DURATION_BUCKETS_MS) + 1)}
            if kind == "succeeded":
                row["succeeded"] += 1
            elif kind == "retryable":
                row["retried"] += 1
            elif kind == "dead":
                row["dead"] += 1
            elif kind == "snoozed":
                row["snoozed"] += 1
            else:
                return
            row["duration_ms_sum"] += duration_ms
            row["duration_hist"][bucket_index(duration_ms)] += 1

    def take(self, worker_id: str) -> list[dict]:
        with self.lock:
            rows, self.rows = self.rows, {}
        return [{"minute": k[0].isoformat(), "worker_id": worker_id, "queue": k[1], "type": k[2], **v}
                for k, v in rows.items()]


def _resolve(path: str) -> Callable:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class Worker:
    def __init__(self, config: Config, url: str, *, queues: dict[str, int] | None = None,
                 worker_id: str | None = None, run_services: bool = True):
        self.config = config
        self.url = url
        self.queues = {name: QueueState(name, n) for name, n in (queues or config.worker_queues).items()}
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = float(config.lease_seconds)
        self.run_services = run_services
        total_slots = sum(q.slots for q in self.queues.values())
        self.pool = ConnectionPool(url, min_size=min(4, len(self.queues) + 2),
                                   max_size=max(8, min(64, len(self.queues) + 4 + total_slots // 2)),
                                   kwargs={"autocommit": True, "row_factory": dict_row,
                                           "options": opsboard.db.SESSION_OPTIONS}, open=False,
                                   name=f"worker-{self.id}", timeout=30)
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.outcomes: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.running: dict[uuid.UUID, Running] = {}
        self.running_lock = threading.Lock()
        self.stats = Stats()
        self.handlers: dict[str, Callable] = {}
        self.is_leader = False
        self.fatal: BaseException | None = None
        self._signals = 0
        self._threads: list[threading.Thread] = []
        self._completer_done = threading.Event()
        self.services = []
        #: Types whose finish may let another job start (a concurrency limit):
        #: their outcomes wake the claimers of every worker (NOTIFY).
        self.limited_types: frozenset[str] = frozenset()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "Worker":
        jobtypes.load_modules(self.config.job_modules)
        from .services import relay  # the outbox relay (every worker); its import registers the event catalogue
        self.limited_types = frozenset(t for q in self.queues for t in jobtypes.concurrency_limits(q).types)
        connect(self.url).close()  # fail fast and clearly when unreachable
        self.pool.open(wait=True, timeout=30)
        with self.pool.connection() as conn:
            conn.execute(opsboard.db.queries["worker_upsert"], {
                "id": self.id, "hostname": socket.gethostname(), "pid": os.getpid(),
                "queues": Jsonb({q.name: q.slots for q in self.queues.values()}),
                "version": opsboard.__version__})
        for qs in self.queues.values():
            for n in range(qs.slots):
                self._spawn_slot(qs, n)
            self._thread(self._fetch_loop, f"fetch-{qs.name}", qs)
        self._thread(self._complete_loop, "completer")
        self._thread(self._listen_loop, "listener")
        self._thread(self._keeper_loop, "keeper")
        self._threads.append(relay.start(self))
        if self.run_services:
            from .services import default_services
            self.services = default_services(self.config)
            self._thread(self._leader_loop, "leader")
        log.info("worker started", extra={"worker_id": self.id})
        log.info("queues: %s", ", ".join(f"{q.name}={q.slots}" for q in self.queues.values()))
        return self

    def _thread(self, target, name, *args) -> threading.Thread:
        t = threading.Thread(target=self._guard, args=(target, name) + args, name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def _guard(self, target, name, *args):
        try:
            target(*args)
        except Exception as exc:  # a dead loop must stop the worker loudly
            log.exception("worker thread %s died", name)
            self.fatal = exc
            self.stopping.set()

    def _spawn_slot(self, qs: QueueState, n: int) -> None:
        slot = Slot(self, qs, n)
        qs.threads.append(slot)
        slot.start()

    def install_signals(self) -> None:
        def handler(signum, frame):
            self._signals += 1
            if self._signals > 1:
                log.warning("second signal: exiting now; leases will recover running jobs")
                os._exit(130)
            log.info("signal %s: stopping (grace %ss)", signal.Signals(signum).name,
                     self.config.shutdown_grace_seconds)
            self.stopping.set()
            for qs in self.queues.values():
                qs.wake.set()
                qs.slot_freed.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Start, serve until a signal (or a fatal error), shut down; returns the exit status."""
        self.start()
        while not self.stopping.wait(0.5):
            pass
        return self.shutdown()

    def stop(self) -> None:
        self.stopping.set()
        for qs in self.queues.values():
            qs.wake.set()
            qs.slot_freed.set()

    def shutdown(self) -> int:
        """Graceful stop: release unstarted jobs, wait for running ones, release the rest."""
        self.stop()
        try:
            self._set_state("stopping")
        except psycopg.Error:
            pass
        # No claim may be in flight once we start counting what to release.
        for t in self._threads:
            if t.name.startswith("fetch-"):
                t.join(timeout=15)
        # Jobs claimed but not started go back at once.
        for qs in self.queues.values():
            while True:
                try:
                    item = qs.work.get_nowait()
                except queue_mod.Empty:
                    break
                if item is not None:
                    self._release(item, "shutdown")
                    with qs.lock:
                        qs.in_flight -= 1
        # Wait for every claimed job to be given back by its slot (finished, or
        # released by a slot that saw the stop), up to the grace period.
        deadline = time.monotonic() + self.config.shutdown_grace_seconds
        while time.monotonic() < deadline:
            if all(qs.in_flight <= 0 for qs in self.queues.values()):
                break
            time.sleep(0.05)
        with self.running_lock:
            leftovers = [r for r in self.running.values() if not r.done and not r.abandoned]
        for r in leftovers:
            r.abandoned = True
            if r.ctx:
                r.ctx.cancelled.set()
            self._release(r, "shutdown_grace_exceeded")
        if leftovers:
            log.warning("released %d job(s) still running after the grace period", len(leftovers))
        for qs in self.queues.values():
            for _ in qs.threads:
                qs.work.put(None)
        self.stopped.set()
        self._completer_done.wait(timeout=15)
        try:
            with self.pool.connection(timeout=5) as conn:
                conn.execute(opsboard.db.queries["worker_delete"], {"id": self.id})
        except Exception:
            pass
        self.pool.close()
        log.info("worker stopped", extra={"worker_id": self.id})
        return 1 if self.fatal else 0

    # ------------------------------------------------------------ claiming

    def _fetch_loop(self, qs: QueueState) -> None:
        failures = 0
        while not self.stopping.is_set():
            with qs.lock:
                free = qs.slots - qs.in_flight
            if free <= 0:
                qs.slot_freed.wait(self.config.poll_interval)
                qs.slot_freed.clear()
                continue
            qs.wake.clear()
            try:
                with self.pool.connection() as conn:
                    claimed = queue.claim(conn, qs.name, self.id, min(free, CLAIM_BATCH_MAX), self.lease,
                                          after_tenant=qs.after_tenant)
                rows, qs.after_tenant = claimed.rows, claimed.next_after_tenant
                failures = 0
            except psycopg.Error as exc:
                failures += 1
                log.warning("claim failed on %s (%s); retrying", qs.name, type(exc).__name__)
                self.stopping.wait(min(5.0, 0.1 * 2 ** failures))
                continue
            if not rows:
                qs.wake.wait(self.config.poll_interval)
                continue
            if self.stopping.is_set():
                for row in rows:
                    self._release(Running(row, None), "shutdown")
                return
            with qs.lock:
                qs.in_flight += len(rows)
            for row in rows:
                qs.work.put(row)

    # ------------------------------------------------------------ running

    def _handler(self, path: str) -> Callable:
        fn = self.handlers.get(path)
        if fn is None:
            fn = self.handlers[path] = _resolve(path)
        return fn

    def _free_slot(self, r: Running) -> None:
        qs = r.slot.qs
        with qs.lock:
            if r.freed:
                return
            r.freed = True
            qs.in_flight -= 1
        qs.slot_freed.set()

    def _run_job(self, row: dict, slot: Slot) -> None:
        try:
            jt = jobtypes.get(row["type"], row["version"])
        except jobtypes.UnknownJobType:
            jt = None
        r = Running(row, jt, slot=slot)
        try:
            r.started_mono = time.monotonic()
            r.started_at = datetime.now(timezone.utc)
            if self.stopping.is_set():
                self._release(r, "shutdown")
                return
            if jt is None:
                # This worker does not know the type (a rolling deploy: the producer
                # runs newer code, or OPSBOARD_JOB_MODULES differs).  Give the job
                # back without spending an attempt, for a worker that knows it; it
                # stays visible as pending with code unknown_job_type meanwhile.
                log.error("unknown job type %s v%s; snoozing it for %ss", row["type"], row["version"],
                          UNKNOWN_TYPE_SNOOZE, extra={"job_id": row["id"], "tenant_id": row["tenant_id"]})
                self._finish(r, retry.Snooze(seconds=UNKNOWN_TYPE_SNOOZE, code="unknown_job_type"))
                return
            r.deadline = r.started_mono + jt.policy.timeout
            r.ctx = JobContext(
                id=row["id"], type=row["type"], version=row["version"], tenant_id=row["tenant_id"],
                queue=row["queue"], payload=row["payload"], attempt=row["attempts"],
                max_attempts=row["max_attempts"], idempotency_key=row["idempotency_key"],
                group_key=row["group_key"], correlation_id=row["correlation_id"], event_id=row["event_id"],
                expires_at=row["expires_at"], worker_id=self.id, pool=self.pool)
            with self.running_lock:
                self.running[row["id"]] = r
            try:
                waiting = self._rate_limited(jt)
                if waiting is not None:
                    outcome = waiting
                else:
                    handler = self._handler(jt.handler)
                    outcome = retry.classify(handler(r.ctx))
            except retry.Outcome as exc:
                outcome = exc
            except Exception as exc:
                outcome = retry.classify(exc)
            if not r.abandoned:
                self._finish(r, outcome)
        finally:
            self._free_slot(r)

    def _rate_limited(self, jt: jobtypes.JobType) -> retry.Snooze | None:
        """Take the provider's token; without one, snooze until the next (attempt not counted)."""
        prov = jobtypes.provider(jt.policy.provider)
        if prov is None or prov.rate_per_second is None:
            return None
        with self.pool.connection() as conn:
            token = take_token(conn, f"provider:{prov.name}", prov.rate_per_second, prov.burst or 1)
        if token.granted:
            return None
        return retry.Snooze(seconds=token.wait_seconds, code="rate_limited")

    def _finish(self, r: Running, outcome: retry.Outcome) -> None:
        row, jt = r.row, r.jt
        r.done = True
        with self.running_lock:
            self.running.pop(row["id"], None)
        policy = jt.policy if jt else jobtypes.JobPolicy()
        decision = retry.decide(outcome, row["attempts"], row["max_attempts"], policy.backoff_base,
                                policy.backoff_cap, now=datetime.now(timezone.utc))
        duration = int((time.monotonic() - r.started_mono) * 1000) if r.started_mono else 0
        self.outcomes.put((queue.OutcomeRecord(
            job_id=row["id"], token=row["attempts"], kind=decision.kind,
            started_at=r.started_at or datetime.now(timezone.utc), duration_ms=duration, delay=decision.delay,
            code=decision.code, detail=decision.detail,
            has_effects=bool(r.ctx and r.ctx.has_effects)), row["queue"], row["type"], self._frees_others(row)))
        if decision.kind != "succeeded":
            log.info("job %s: %s", decision.kind, decision.code,
                     extra={"job_id": row["id"], "tenant_id": row["tenant_id"], "job_type": row["type"],
                            "correlation_id": row.get("correlation_id")})

    def _release(self, r, why: str) -> None:
        if isinstance(r, dict):
            r = Running(r, None)
        with self.running_lock:
            self.running.pop(r.row["id"], None)
        self.outcomes.put((queue.OutcomeRecord(
            job_id=r.row["id"], token=r.row["attempts"], kind="released",
            started_at=r.started_at or datetime.now(timezone.utc), code=why), r.row["queue"], r.row["type"],
            self._frees_others(r.row)))

    def _frees_others(self, row: dict) -> bool:
        """Whether this job's end may let a waiting job start (next in its group, or room under a limit)."""
        return row.get("group_key") is not None or row["type"] in self.limited_types

    # ------------------------------------------------------------ completing

    def _complete_loop(self) -> None:
        last_stats = time.monotonic()
        while True:
            batch = []
            try:
                batch.append(self.outcomes.get(timeout=0.2))
            except queue_mod.Empty:
                pass
            while batch and len(batch) < COMPLETE_BATCH_MAX:
                try:
                    batch.append(self.outcomes.get_nowait())
                except queue_mod.Empty:
                    break
            if batch:
                self._write_outcomes(batch)
            if time.monotonic() - last_stats > 2.0 or (self.stopped.is_set() and not batch):
                self._flush_stats()
                last_stats = time.monotonic()
            if self.stopped.is_set() and not batch and self.outcomes.empty():
                self._flush_stats()
                self._completer_done.set()
                return

    def _write_outcomes(self, batch) -> None:
        records = [b[0] for b in batch]
        applied = self._write_records(records)
        if applied is None and len(records) > 1:
            # The batch kept failing: write one by one, so that a single bad
            # record cannot hold back every other job's outcome.
            applied = set()
            for rec in records:
                applied |= self._write_records([rec], tries=2) or set()
        if applied is None:
            log.error("gave up recording %d outcome(s); the reaper will recover those jobs", len(records))
            return
        wake = set()
        for rec, queue_name, type_, frees_others in batch:
            if rec.job_id in applied:
                self.stats.add(queue_name, type_, rec.kind, rec.duration_ms)
                if frees_others:
                    wake.add(queue_name)
        if wake:
            # A finished job of a group or of a limited type can let another one
            # start, which no enqueue would announce: wake every worker's claimer.
            for name in wake:
                if name in self.queues:
                    self.queues[name].wake.set()
            try:
                with self.pool.connection() as conn:
                    opsboard.db.execute(conn, "job_notify_queues", {"queues": sorted(wake)})
            except psycopg.Error as exc:
                log.warning("wake-up notification failed (%s); workers will poll", type(exc).__name__)
        lost = len(records) - len(applied)
        if lost:
            log.warning("%d outcome(s) not applied: lease lost or job reclaimed", lost)

    def _write_records(self, records, tries: int = 8) -> set | None:
        """Write outcomes; ``None`` when they could not be written after ``tries``."""
        for attempt in range(tries):
            try:
                with self.pool.connection() as conn:
                    return queue.record_outcomes(conn, self.id, records)
            except psycopg.OperationalError as exc:  # the database is away: wait for it
                log.warning("recording %d outcomes failed (%s); retrying", len(records), type(exc).__name__)
                time.sleep(min(5.0, 0.1 * 2 ** attempt))
            except psycopg.Error as exc:  # the data itself is refused: retrying will not help
                log.error("recording %d outcomes was refused (%s)", len(records), type(exc).__name__)
                return None
        return None

    def _flush_stats(self) -> None:
        rows = self.stats.take(self.id)
        if not rows:
            return
        try:
            with self.pool.connection() as conn:
                conn.execute(opsboard.db.queries["job_stats_add"], {"rows": Jsonb(rows)})
        except psycopg.Error as exc:
            log.warning("stats flush failed (%s)", type(exc).__name__)

    # ------------------------------------------------------------ waking

    def _listen_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            except psycopg.Error:
                self.stopping.wait(2.0)
                continue
            try:
                conn.execute(f"LISTEN {JOBS_CHANNEL}")
                while not self.stopping.is_set():
                    for n in conn.notifies(timeout=0.5):
                        qs = self.queues.get(n.payload)
                        if qs is not None:
                            qs.wake.set()
            except psycopg.Error as exc:
                log.warning("listener lost its connection (%s); polling until it is back", type(exc).__name__)
                self.stopping.wait(1.0)
            finally:
                conn.close()

    # ------------------------------------------------------------ timeouts, leases, presence

    def _keeper_loop(self) -> None:
        last_beat = 0.0
        beat_every = max(0.5, min(self.lease / 3, 10.0))
        while not self.stopping.wait(0.1):
            now = time.monotonic()
            with self.running_lock:
                current = list(self.running.values())
            for r in current:
                if not r.done and not r.abandoned and r.deadline and now > r.deadline:
                    r.abandoned = True
                    if r.ctx:
                        r.ctx.cancelled.set()
                    log.warning("job timed out after %ss", r.jt.policy.timeout,
                                extra={"job_id": r.row["id"], "job_type": r.row["type"]})
                    self._finish(r, retry.Unknown("timeout", f"handler ran past its {r.jt.policy.timeout}s timeout"))
                    # The hung thread cannot be killed: retire it and give the queue a fresh slot.
                    if r.slot is not None:
                        r.slot.retired = True
                        self._spawn_slot(r.slot.qs, len(r.slot.qs.threads))
                        self._free_slot(r)
            if now - last_beat >= beat_every:
                last_beat = now
                try:
                    self._heartbeat(current)
                except psycopg.Error as exc:
                    log.warning("heartbeat failed (%s)", type(exc).__name__)

    def _heartbeat(self, current: list[Running]) -> None:
        held = [(r.row["id"], r.row["attempts"]) for r in current
                if not r.done and not r.abandoned and r.jt
                and (r.jt.policy.long_running or r.jt.policy.timeout > self.lease / 2)]
        with self.pool.connection() as conn:
            if held:
                kept = queue.heartbeat(conn, self.id, held, self.lease)
                for job_id, _ in held:
                    if job_id not in kept:
                        r = self.running.get(job_id)
                        if r and r.ctx:
                            r.ctx.cancelled.set()
                            log.warning("lease lost; the handler was asked to stop", extra={"job_id": job_id})
            conn.execute(opsboard.db.queries["worker_heartbeat"], {
                "id": self.id, "state": "stopping" if self.stopping.is_set() else "running",
                "is_leader": self.is_leader, "running_jobs": len(current)})

    def _set_state(self, state: str) -> None:
        with self.pool.connection(timeout=2) as conn:
            conn.execute(opsboard.db.queries["worker_heartbeat"], {
                "id": self.id, "state": state, "is_leader": False, "running_jobs": len(self.running)})

    # ------------------------------------------------------------ leadership

    def _leader_loop(self) -> None:
        from .services import LeaderLock

        lock = LeaderLock(self.url)
        next_run = {s.name: 0.0 for s in self.services}
        try:
            while not self.stopping.wait(0.2):
                self.is_leader = lock.try_hold()
                if not self.is_leader:
                    self.stopping.wait(2.0)
                    continue
                for service in self.services:
                    if time.monotonic() < next_run[service.name]:
                        continue
                    next_run[service.name] = time.monotonic() + service.interval
                    try:
                        with self.pool.connection() as conn:
                            n = service.run_once(conn)
                        if n:
                            level = logging.DEBUG if getattr(service, "quiet", False) else logging.INFO
                            log.log(level, "%s handled %d", service.name, n,
                                    extra={"service": service.name, "count": n})
                    except psycopg.OperationalError as exc:
                        log.warning("%s: database unavailable (%s)", service.name, type(exc).__name__)
        finally:
            lock.release()
            self.is_leader = False
