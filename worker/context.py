"""What a handler sees of its job: :class:`JobContext`.

A handler's database connections come from the worker's *handler* pool, never
from the pool the worker claims, records and heartbeats with: a handler stuck
in a slow query cannot starve the worker.  Each running job may hold at most
:data:`HANDLER_CONNECTIONS_PER_SLOT` connections at a time; each carries a
``statement_timeout`` no longer than what is left of the job's timeout, and
the keeper cancels a timed-out handler's running query.

Settings reach a handler here too (``job.settings``: the worker's
:class:`~opsboard.config.ProviderSettings`, parsed once with its
:class:`~opsboard.config.Config`), never through a process-wide global.
"""
from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator

import psycopg
from psycopg_pool import ConnectionPool

from opsboard import db, jobqueue
from opsboard.jobqueue import batches, workflows
from opsboard.config import ProviderSettings

#: Connections one running job may hold at the same time.
HANDLER_CONNECTIONS_PER_SLOT = 2


#: Guards the lazy creation of a context's ``cancelled`` event (rare: only a
#: handler or the keeper that looks at it creates it).
_LAZY_LOCK = threading.Lock()


class LeaseLost(Exception):
    """This attempt no longer holds its job (lease expired or taken over): stop, write nothing."""


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
    has_effects: bool = False
    #: What the handler's ``prepare_batch`` hook loaded for this job with its claimed batch, if anything.
    prepared: Any = None
    #: ``time.monotonic()`` by which the handler must be done (its timeout); 0 for none.
    deadline: float = 0.0
    #: The worker's provider settings (``Config.providers``): SMTP, SMS gateway, Web Push,
    #: webhooks, breakers.  Set by the executor; None only where no worker built the context.
    settings: ProviderSettings | None = None
    #: The handler pool goes through a transaction pooler (``OPSBOARD_DATABASE_POOLER=transaction``).
    transaction_pooler: bool = False
    _n_held: int = field(default=0, repr=False)
    _conns: list = field(default_factory=list, repr=False)
    _held_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cancelled: threading.Event | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the lease was lost or the timeout passed: stop as soon as you can.

        Created on first use (most handlers never look at it, and an Event
        per job was a visible share of the worker's CPU on no-op jobs); whoever comes
        first, handler or keeper, creates the one both see.
        """
        ev = self._cancelled
        if ev is None:
            with _LAZY_LOCK:
                ev = self._cancelled
                if ev is None:
                    ev = self._cancelled = threading.Event()
        return ev

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection for loading what the payload references.

        Its ``statement_timeout`` ends with the job's timeout.  A job holds at
        most :data:`HANDLER_CONNECTIONS_PER_SLOT` at once (more is a bug: it raises).

        Behind a transaction pooler a session setting would stay on the server
        connection for its next client, and this block's next statement may run
        on another one: there the block is one transaction that begins with
        ``SET LOCAL statement_timeout`` (committed when the block ends, rolled
        back if it raises).
        """
        with self._held_lock:
            if self._n_held >= HANDLER_CONNECTIONS_PER_SLOT:
                raise RuntimeError(f"a job holds at most {HANDLER_CONNECTIONS_PER_SLOT} connections at once")
            self._n_held += 1
        try:
            left = self._seconds_left()
            with self.pool.connection(timeout=max(0.1, left) if left is not None else None) as conn:
                with self._held_lock:
                    self._conns.append(conn)
                try:
                    timeout = f"{max(1, int(left * 1000))}ms" if left is not None else "0"
                    if self.transaction_pooler:
                        with conn.transaction():
                            db.set_local(conn, statement_timeout=timeout)
                            yield conn
                    else:
                        # Set on every checkout (the previous job's value must not leak); 0 = none.
                        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout,))
                        yield conn
                finally:
                    with self._held_lock:
                        self._conns.remove(conn)
        finally:
            with self._held_lock:
                self._n_held -= 1

    def _seconds_left(self) -> float | None:
        if not self.deadline:
            return None
        return self.deadline - time.monotonic()

    def cancel_queries(self) -> int:
        """Cancel whatever query this job's connections are running (the keeper calls it on a timeout)."""
        with self._held_lock:
            conns = list(self._conns)
        n = 0
        for conn in conns:
            try:
                conn.cancel_safe(timeout=2.0)
                n += 1
            except Exception:  # already closed or the server is away: nothing left to cancel
                pass
        return n

    def still_held(self) -> bool:
        """Whether this attempt still holds its job, asked of the database now.

        Fenced by ``(locked_by, attempts)`` and the lease's end: ``False`` once
        the lease ran out (even before the reaper noticed) or another attempt
        took the job.  ``job.cancelled`` is only set at the next heartbeat.
        """
        with self.connection() as conn:
            row = db.one(conn, "job_still_held", {"id": self.id, "worker": self.worker_id, "attempt": self.attempt,
                                                 "now": None})
        held = bool(row and row["held"])
        if not held:
            self.cancelled.set()
        return held

    @property
    def workflow_task_id(self) -> uuid.UUID | None:
        """The workflow task this job is (:mod:`opsboard.jobqueue.workflows`), or ``None``."""
        key = self.idempotency_key
        return workflows.task_id_of(key) if workflows.is_task_key(key) else None

    def dependency_results(self) -> dict[str, Any]:
        """This task's dependencies by name, each one's recorded result (``{}`` for a job that is not
        a workflow task)."""
        task = self.workflow_task_id
        if task is None:
            return {}
        with self.connection() as conn:
            return workflows.dependency_results(conn, task)

    def add_to_batch(self, jobs: list[dict]) -> list[str]:
        """Add jobs to this job's own batch while it is open (:func:`opsboard.jobqueue.batches.add`):
        each ``{"name", "type", "payload"}``; returns their task ids."""
        task = self.workflow_task_id
        if task is None:
            raise ValueError("this job is not a member of a batch")
        with self.connection() as conn:
            with conn.transaction():
                return batches.add_from_member(conn, task, jobs)

    def effect_key(self) -> str:
        """The default effect key: tenant, type and idempotency key (else the job id)."""
        return f"{self.tenant_id}:{self.type}:{self.idempotency_key or self.id}"

    def begin_effect(self, provider: str, key: str | None = None) -> dict:
        """Record an external effect as started, or return the existing record
        (see :func:`opsboard.jobqueue.begin_effect`), only while this attempt holds the job.

        In one statement with the lease check: a stale attempt (paused past its
        lease, or its job taken over) raises :class:`LeaseLost` instead of
        starting or adopting an effect another attempt owns.  The ledger records
        which attempt started (or last adopted) the effect.
        """
        self.has_effects = True
        with self.connection() as conn:
            row = db.one(conn, "effect_begin_held", {
                "key": key or self.effect_key(), "job_id": self.id, "tenant_id": self.tenant_id,
                "provider": provider, "worker": self.worker_id, "attempt": self.attempt, "now": None})
        if row is None or not row["held"]:
            self.cancelled.set()
            raise LeaseLost(f"job {self.id} attempt {self.attempt} no longer holds its lease")
        return {k: v for k, v in row.items() if k != "held"}

    def set_effect_ref(self, ref: str, key: str | None = None) -> None:
        """Remember the provider's reference for this job's started effect."""
        with self.connection() as conn:
            jobqueue.set_effect_ref(conn, key or self.effect_key(), {"id": self.id, "tenant_id": self.tenant_id}, ref)
