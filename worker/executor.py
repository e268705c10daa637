"""The executor: slots that run handlers, and the outcome each run produces.

A queue's ``N`` slots only ever run that queue's jobs, so ``critical`` keeps
its capacity under any backlog.  A slot hands its outcome to the completer
(:mod:`worker.completer`) through a bounded queue: when the completer falls
behind, slots wait there and the fetcher stops claiming.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import psycopg

from opsboard import jobqueue, jobtypes, retry, tenancy, tracing
from opsboard.backpressure import take_token

from opsboard.jobqueue import results, workflows

from .context import JobContext, LeaseLost

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from opsboard.config import ProviderSettings

    from .fetcher import HoldsCache, QueueState
    from .parts import OutcomeSink
    from .running_file import RunningFile

log = logging.getLogger("worker")

#: Seconds a job of a type this worker does not know waits before it is offered again.
UNKNOWN_TYPE_SNOOZE = 60.0
#: The policy of a job whose type this worker does not know (its backoff, for :meth:`Executor.finish`).
_DEFAULT_POLICY = jobtypes.JobPolicy()


@dataclass
class Running:
    """A claimed job while a slot runs it."""

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
    #: The JSON text of the result the handler returned (opsboard.jobqueue.results), if any.
    result: str | None = None


class RunningJobs:
    """The jobs this worker's slots run now, by id: the executor adds and removes them (under
    ``lock``), the keeper and the shutdown read them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_id: dict = {}

    def list(self) -> list[Running]:
        with self.lock:
            return list(self.by_id.values())

    def get(self, job_id) -> Running | None:
        return self.by_id.get(job_id)

    def __len__(self) -> int:
        return len(self.by_id)


class _Batch:
    """The jobs of one claim sharing a ``prepare_batch`` hook, run once by the first slot to need it."""

    def __init__(self, hook: Callable, rows: list[dict]):
        self.hook, self.rows, self.lock, self.done = hook, rows, threading.Lock(), False

    def ensure(self, handler_pool: "ConnectionPool", worker_id: str) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            try:
                with handler_pool.connection() as conn:
                    self.hook(conn, worker_id, self.rows)
            except Exception:
                log.warning("prepare_batch failed; its jobs run unprepared", exc_info=True)
                for row in self.rows:
                    row.pop("prepared", None)


class Slot(threading.Thread):
    """One handler thread of a queue."""

    def __init__(self, executor: "Executor", qs: "QueueState", n: int):
        super().__init__(name=f"slot-{qs.name}-{n}", daemon=True)
        self.executor, self.qs, self.retired = executor, qs, False
        rf = executor.running_file
        #: This slot's record in the supervisor's running file (see worker.running_file).
        self.record = rf.take_index() if rf is not None else None

    def run(self) -> None:
        try:
            self._run()
        finally:
            rf = self.executor.running_file
            if rf is not None:
                rf.give_back(self.record)

    def _run(self) -> None:
        while not self.retired:
            qs = self.qs
            item = qs.work.get()
            if item is None:
                return
            # The fetcher's measure of how fast slots turn over (its buffer) and whether they all are
            # busy (its hand-back); free_slot counts the end.
            with qs.lock:
                qs.taken += 1
                qs.busy += 1
            qs.last_take = time.monotonic()
            self.executor.run_job(item, self)
        # Retired by the keeper (its handler ran past the timeout) and now back:
        # another slot took its place, so this thread ends.
        with self.qs.lock:
            self.qs.abandoned -= 1


class Executor:
    """Runs jobs in slots and turns each run into an outcome for the completer.

    Its collaborators: the ``completer`` its outcomes go to; the ``holds`` in force (whether a
    job's end may let another start); the ``handler_pool`` the handlers draw from; the
    ``running`` jobs it registers for the keeper and the shutdown; the supervisor's
    ``running_file`` (or ``None``); the worker's ``stopping`` event; and the values a job
    context carries (``worker_id``, ``settings``, ``transaction_pooler``) or its lease is
    judged by (``lease``).  What an outcome means for its job is decided by :func:`opsboard.retry.decide`
    with the job type's policy (:data:`_DEFAULT_POLICY` for a type it does not know).
    """

    def __init__(self, completer: "OutcomeSink", holds: "HoldsCache", handler_pool: "ConnectionPool", *,
                 worker_id: str, lease: float, settings: "ProviderSettings | None" = None,
                 transaction_pooler: bool = False, running: RunningJobs | None = None,
                 running_file: "RunningFile | None" = None, stopping: threading.Event | None = None,
                 result_max_bytes: int = results.DEFAULT_MAX_BYTES):
        self.completer = completer
        self.holds = holds
        self.handler_pool = handler_pool
        self.worker_id = worker_id
        self.lease = lease
        self.settings = settings
        self.transaction_pooler = transaction_pooler
        self.running = running if running is not None else RunningJobs()
        self.running_file = running_file
        self.stopping = stopping if stopping is not None else threading.Event()
        #: The largest result a handler may return (Config.job_result_max_bytes).
        self.result_max_bytes = result_max_bytes
        #: Types whose finish may let another job start (a concurrency limit):
        #: their outcomes wake the claimers of every worker (NOTIFY).
        self.limited_types: frozenset[str] = frozenset()
        #: Whose scope a handler runs in (opsboard.tenancy: the job's tenant, or the operator's).
        self.operators = tenancy.OperatorTenants()

    def spawn_slot(self, qs: "QueueState") -> Slot:
        slot = Slot(self, qs, len(qs.threads))
        qs.threads.append(slot)
        slot.start()
        return slot

    def free_slot(self, r: Running) -> None:
        qs = r.slot.qs
        with qs.lock:
            if r.freed:
                return
            r.freed = True
            qs.in_flight -= 1
            qs.busy -= 1
            # Wake the fetcher only once it has room to claim (see
            # QueueState.refill_at), and only if no one woke it already: a
            # wake-up per finished job cost a thread switch and a pass of its
            # loop per job.  The fetcher clears the event before it counts
            # again, so a set skipped here was seen by that count.
            wake = qs.in_flight <= qs.refill_at
        if wake and not qs.slot_freed.is_set():
            qs.slot_freed.set()

    def run_job(self, row: dict, slot: Slot) -> None:
        try:
            jt = jobtypes.get(row["type"], row["version"])
        except jobtypes.UnknownJobType:
            jt = None
        r = Running(row, jt, slot=slot, started_mono=time.monotonic(), started_at=datetime.now(timezone.utc))
        try:
            if self.stopping.is_set():
                self.release(r, "shutdown")
                return
            buffered = r.started_mono - row.get("claimed_mono", r.started_mono)
            lease = self.lease
            if jt is not None and buffered + jt.policy.timeout > lease * 0.9 and not (
                    jt.policy.long_running or jt.policy.timeout > lease / 2):
                # Waited in the prefetch buffer so long that the lease could end
                # before the handler's timeout (no heartbeat covers it): give it
                # back unstarted rather than risk a second runner.
                self.release(r, "prefetch_expired")
                return
            if jt is None:
                # This worker does not know the type (a rolling deploy: the producer
                # runs newer code, or OPSBOARD_JOB_MODULES differs).  Give the job
                # back without spending an attempt, for a worker that knows it; it
                # stays visible as pending with code unknown_job_type meanwhile.
                log.error("unknown job type %s v%s; snoozing it for %ss", row["type"], row["version"],
                          UNKNOWN_TYPE_SNOOZE, extra={"job_id": row["id"], "tenant_id": row["tenant_id"]})
                self.finish(r, retry.Snooze(seconds=UNKNOWN_TYPE_SNOOZE, code="unknown_job_type"))
                return
            batch = row.pop("batch", None)
            if batch is not None:
                batch.ensure(self.handler_pool, self.worker_id)
            r.deadline = r.started_mono + jt.policy.timeout
            r.ctx = JobContext(
                id=row["id"], type=row["type"], version=row["version"], tenant_id=row["tenant_id"],
                queue=row["queue"], payload=row["payload"], attempt=row["attempts"],
                max_attempts=row["max_attempts"], idempotency_key=row["idempotency_key"],
                group_key=row["group_key"], correlation_id=row["correlation_id"], event_id=row["event_id"],
                expires_at=row["expires_at"], worker_id=self.worker_id, pool=self.handler_pool,
                deadline=r.deadline, prepared=row.pop("prepared", None), settings=self.settings,
                transaction_pooler=self.transaction_pooler)
            running = self.running
            with running.lock:
                running.by_id[row["id"]] = r
            if self.running_file is not None:
                # From here on a crash may be this job's doing (the supervisor reads it).
                self.running_file.mark(slot.record, row["id"])
            # A span per attempt (a shared no-op while tracing is off: opsboard.tracing).
            with tracing.attempt(row) as span, self.operators.scope_of_job(self.handler_pool, row["tenant_id"]):
                try:
                    waiting = self.rate_limited(jt, row["queue"])
                    if waiting is not None:
                        outcome = waiting
                    else:
                        outcome = self.outcome_of(r, jobtypes.handler_of(jt)(r.ctx))
                except retry.Outcome as exc:
                    outcome = exc
                except psycopg.errors.QueryCanceled as exc:
                    # Past the job's timeout, this is our statement_timeout (or the
                    # keeper's cancel): the handler timed out.
                    if time.monotonic() >= r.deadline - 0.05:
                        outcome = retry.Unknown("timeout", f"handler ran past its {jt.policy.timeout}s timeout")
                    else:
                        outcome = retry.classify(exc)
                except LeaseLost:
                    outcome = retry.Unknown("lease_lost", "this attempt no longer held its job")
                except Exception as exc:
                    outcome = retry.classify(exc)
                span.record(outcome)
            if not r.abandoned:
                self.finish(r, outcome)
        finally:
            if self.running_file is not None:
                self.running_file.clear(slot.record)
            self.free_slot(r)

    def outcome_of(self, r: Running, value) -> retry.Outcome:
        """A handler's return value as an outcome: ``None`` or an outcome as it is; any other value
        is a result to record (kept in ``r.result``), or a failure when it is too large or not JSON
        (:func:`opsboard.jobqueue.results.accept`)."""
        if value is None or isinstance(value, retry.Outcome):
            return retry.classify(value)
        outcome, r.result = results.accept(value, self.result_max_bytes)
        return outcome

    def prepare(self, rows: list[dict]) -> None:
        """Mark the jobs of a claimed batch whose type has a ``prepare_batch`` hook.

        The hook does in one statement what each job would otherwise do on its
        own before its side effect (load, begin the effect), leaving ``prepared``
        in the rows it did.  It runs in the first slot that starts one of them
        (not in the claim loop), for all of them at once; a hook that fails
        leaves the rows as they were (their handlers do it all themselves).
        With tracing on, the rows also get their stored trace context (one statement).
        """
        if tracing.enabled():
            tracing.load_contexts(self.handler_pool, rows)
        by_hook: dict[Callable, list[dict]] = {}
        hooks: dict[tuple, Callable | None] = {}  # one lookup per type in the batch, not per job
        for row in rows:
            key = (row["type"], row["version"])
            try:
                hook = hooks[key]
            except KeyError:
                try:
                    hook = jobtypes.prepare_of(jobtypes.get(*key))
                except Exception:  # unknown type, hook not importable: run_job deals with it
                    hook = None
                hooks[key] = hook
            if hook is not None:
                by_hook.setdefault(hook, []).append(row)
        for hook, group in by_hook.items():
            batch = _Batch(hook, group)
            for row in group:
                row["batch"] = batch

    def rate_limited(self, jt: jobtypes.JobType, queue: str) -> retry.Snooze | None:
        """Take the provider's token (a job of a queue other than ``critical`` leaves the critical
        queue's reserve); without one, snooze until the next (attempt not counted)."""
        prov = jobtypes.provider(jt.policy.provider)
        if prov is None or prov.rate_per_second is None:
            return None
        with self.handler_pool.connection() as conn:
            token = take_token(conn, f"provider:{prov.name}", prov.rate_per_second, prov.burst or 1,
                               floor=prov.rate_floor(queue))
        if token.granted:
            return None
        return retry.Snooze(seconds=token.wait_seconds, code="rate_limited")

    def finish(self, r: Running, outcome: retry.Outcome, *, block: bool = True,
               timeout: float | None = None) -> None:
        """Decide what the outcome means for the job and queue it for the completer."""
        row, jt = r.row, r.jt
        r.done = True
        running = self.running
        with running.lock:
            running.by_id.pop(row["id"], None)
        policy = jt.policy if jt else _DEFAULT_POLICY
        # The clock is read for a snooze "until" only (the one outcome that needs it).
        decision = retry.decide(outcome, row["attempts"], row["max_attempts"], policy.backoff_base,
                                policy.backoff_cap,
                                now=datetime.now(timezone.utc) if isinstance(outcome, retry.Snooze) else None)
        elapsed = time.monotonic() - r.started_mono if r.started_mono else 0.0
        duration = int(elapsed * 1000)
        if r.slot is not None and decision.kind != "released":
            r.slot.qs.observe(elapsed)
        self.completer.submit((jobqueue.OutcomeRecord(
            job_id=row["id"], token=row["attempts"], kind=decision.kind,
            started_at=r.started_at or datetime.now(timezone.utc), duration_ms=duration, delay=decision.delay,
            code=decision.code, detail=decision.detail,
            has_effects=bool(r.ctx and r.ctx.has_effects), result=r.result,
            # A workflow task's job says so by its key (wf:<task id>): its end releases its dependents.
            task=workflows.task_id_of(key) if (key := row["idempotency_key"]) is not None
            and key.startswith(workflows.TASK_KEY_PREFIX) else None),
            row["queue"], row["type"], self.frees_others(row)),
            block=block, timeout=timeout)
        if decision.kind != "succeeded":
            # A snooze is routine (an open breaker's jobs wait in batches): debug, not a line per job.
            log.log(logging.DEBUG if decision.kind == "snoozed" else logging.INFO,
                    "job %s: %s", decision.kind, decision.code,
                    extra={"job_id": row["id"], "tenant_id": row["tenant_id"], "job_type": row["type"],
                           "correlation_id": row.get("correlation_id")})

    def release(self, r: "Running | dict", why: str, *, block: bool = True) -> None:
        """Give a job back to ``pending`` without counting the attempt."""
        if isinstance(r, dict):
            r = Running(r, None)
        running = self.running
        with running.lock:
            running.by_id.pop(r.row["id"], None)
        self.completer.submit((jobqueue.OutcomeRecord(
            job_id=r.row["id"], token=r.row["attempts"], kind="released",
            started_at=r.started_at or datetime.now(timezone.utc), code=why), r.row["queue"], r.row["type"],
            self.frees_others(r.row)), block=block)

    def frees_others(self, row: dict) -> bool:
        """Whether this job's end may let a waiting job start (next in its group, or room under a limit)."""
        return (row.get("group_key") is not None or row["type"] in self.limited_types
                or row["type"] in self.holds.limited_types()
                or row["tenant_id"] in self.holds.limited_tenants())
