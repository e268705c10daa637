"""Run one job through the worker's executor (claim, JobContext, handler, decide, record) in-process.

Delivery tests use it to drive handlers against the sandbox with a real
database, without a worker subprocess; the acceptance tests use the real worker.
Settings reach the handlers the way the worker hands them over: in the job
context the executor builds (``Runner.settings`` -> ``JobContext.settings``),
never a global.
"""
from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace

import pytest
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from opsboard import db, jobqueue
from opsboard.config import ProviderSettings
from worker.executor import Executor
from worker.fetcher import HoldsCache


class _Completer:
    """The worker's completer, for one job: keeps what the executor submits (the Runner records it)."""

    def __init__(self):
        self.items: list[tuple] = []

    def submit(self, item: tuple, *, block: bool = True, timeout: float | None = None) -> bool:
        self.items.append(item)
        return True


class _QueueState:
    """What the executor touches of a fetcher's queue state (one slot, one job in flight)."""

    def __init__(self, name: str):
        self.name, self.lock, self.in_flight, self.refill_at = name, threading.Lock(), 1, 0
        self.slot_freed = threading.Event()
        self.busy = 1   # the slot running the job (issue 50: free_slot counts it back)

    def observe(self, elapsed: float) -> None:
        pass


class _Executor(Executor):
    def finish(self, r, outcome, **kw):
        self.last_outcome = outcome
        super().finish(r, outcome, **kw)


class Runner:
    """Claims one job and runs it through the worker's own executor (``Executor.prepare`` and
    ``run_job``: batch hook, rate limit, JobContext with the settings, handler, classification,
    decision), in this thread; the outcome is recorded as the completer would."""

    def __init__(self, url: str, settings: ProviderSettings | None = None):
        #: The provider settings put in every job context this runner builds (the worker's ``Config.providers``).
        self.settings = settings if settings is not None else ProviderSettings()
        self.pool = ConnectionPool(url, min_size=1, max_size=4, open=True,
                                   kwargs={"autocommit": True, "row_factory": dict_row,
                                           "options": db.SESSION_OPTIONS})

    def close(self):
        self.pool.close()

    def run(self, job_id, queue_name: str = "default", worker: str = "test-worker") -> dict:
        """Claim ``job_id`` (it must be due), run its handler, record the outcome; returns the job row after."""
        with self.pool.connection() as conn:
            # The other waiting jobs of the queue step aside while this one is claimed: a claim takes at
            # most a key's limit of jobs sharing a concurrency key (issue 50: 4 per webhook endpoint),
            # and not necessarily this one among them.
            aside = [r["id"] for r in conn.execute(
                "UPDATE jobs SET available_at = available_at + interval '1 day' WHERE queue = %s AND id <> %s "
                "AND status IN ('pending', 'retryable') RETURNING id", (queue_name, job_id)).fetchall()]
            try:
                rows = jobqueue.claim_batch(conn, queue_name, worker, 200, 30)
            finally:
                conn.execute("UPDATE jobs SET available_at = available_at - interval '1 day' WHERE id = ANY(%s)",
                             (aside,))
            row = next((r for r in rows if r["id"] == job_id), None)
            others = [r for r in rows if r["id"] != job_id]
            if others:  # give back what we did not ask for
                jobqueue.record_outcomes(conn, worker, [jobqueue.OutcomeRecord(r["id"], r["attempts"], "released",
                                                                         r["started_at"]) for r in others])
        assert row is not None, "the job was not claimable"
        completer = _Completer()
        executor = _Executor(completer, HoldsCache(), self.pool, worker_id=worker, lease=30.0, settings=self.settings)
        executor.prepare([row])
        executor.run_job(row, SimpleNamespace(qs=_QueueState(queue_name), record=None))
        self.last_outcome = getattr(executor, "last_outcome", None)
        (record, *_), = completer.items
        with self.pool.connection() as conn:
            jobqueue.record_outcomes(conn, worker, [record])
            return conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()

    def make_due(self, job_id) -> None:
        with self.pool.connection() as conn:
            conn.execute("UPDATE jobs SET available_at = now() WHERE id = %s", (job_id,))


def sandbox_settings(sb, **changes) -> ProviderSettings:
    import ipaddress
    base = dict(smtp_host="127.0.0.1", smtp_port=sb.smtp_port, sms_url=f"{sb.url}/sms", sms_key=sb.sms_key,
                webhook_allow=(ipaddress.ip_network("127.0.0.1/32"),), webhook_timeout=2.0, sms_timeout=2.0,
                smtp_timeout=2.0, push_timeout=2.0)
    base.update(changes)
    return ProviderSettings(**base)


@pytest.fixture
def runner(db_url):
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def provider_settings(request, sandbox):
    """Settings pointing the providers at the sandbox, in the test's ``runner`` (if it has one)."""
    s = sandbox_settings(sandbox)
    if "runner" in request.fixturenames:
        request.getfixturevalue("runner").settings = s
    return s


def insert_event(conn, tenant_id, type_="order.paid", payload=None) -> uuid.UUID:
    """An outbox event row, written directly (the outbox module is another issue's)."""
    from psycopg.types.json import Jsonb
    from opsboard.schema import new_id
    eid = new_id()
    conn.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, payload) "
                 "VALUES (%s, %s, 1, 'order', 'o-1', %s, %s)", (eid, type_, tenant_id, Jsonb(payload or {"id": 1})))
    return eid
