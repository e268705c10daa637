"""Run one job the way a worker slot does (claim, JobContext, handler, decide, record) in-process.

Delivery tests use it to drive handlers against the sandbox with a real
database, without a worker subprocess; the acceptance tests use the real worker.
"""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import pytest
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from opsboard import db, jobqueue, jobtypes, providers, retry
from opsboard.providers import ProviderSettings

try:  # the worker's job context (worker/context.py once the runner is split)
    from worker.context import JobContext  # type: ignore
except ImportError:  # pragma: no cover - before the split
    from worker.runner import JobContext


def _resolve(path: str):
    import importlib
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class Runner:
    def __init__(self, url: str):
        self.pool = ConnectionPool(url, min_size=1, max_size=4, open=True,
                                   kwargs={"autocommit": True, "row_factory": dict_row,
                                           "options": db.SESSION_OPTIONS})

    def close(self):
        self.pool.close()

    def run(self, job_id, queue_name: str = "default", worker: str = "test-worker") -> dict:
        """Claim ``job_id`` (it must be due), run its handler, record the outcome; returns the job row after."""
        with self.pool.connection() as conn:
            rows = jobqueue.claim_batch(conn, queue_name, worker, 200, 30)
            row = next((r for r in rows if r["id"] == job_id), None)
            others = [r for r in rows if r["id"] != job_id]
            if others:  # give back what we did not ask for
                jobqueue.record_outcomes(conn, worker, [jobqueue.OutcomeRecord(r["id"], r["attempts"], "released",
                                                                         r["started_at"]) for r in others])
        assert row is not None, "the job was not claimable"
        jt = jobtypes.get(row["type"], row["version"])
        ctx = JobContext(id=row["id"], type=row["type"], version=row["version"], tenant_id=row["tenant_id"],
                         queue=row["queue"], payload=row["payload"], attempt=row["attempts"],
                         max_attempts=row["max_attempts"], idempotency_key=row["idempotency_key"],
                         group_key=row["group_key"], correlation_id=row["correlation_id"],
                         event_id=row["event_id"], expires_at=row["expires_at"], worker_id=worker, pool=self.pool)
        started = time.monotonic()
        try:
            outcome = retry.classify(_resolve(jt.handler)(ctx))
        except retry.Outcome as o:
            outcome = o
        except Exception as exc:
            outcome = retry.classify(exc)
        self.last_outcome = outcome
        decision = retry.decide(outcome, row["attempts"], row["max_attempts"], jt.policy.backoff_base,
                                jt.policy.backoff_cap, now=datetime.now(timezone.utc))
        with self.pool.connection() as conn:
            jobqueue.record_outcomes(conn, worker, [jobqueue.OutcomeRecord(
                row["id"], row["attempts"], decision.kind, row["started_at"],
                int((time.monotonic() - started) * 1000), decision.delay, decision.code, decision.detail,
                has_effects=ctx.has_effects)])
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
def provider_settings(sandbox):
    """Point the providers at the sandbox for this test."""
    s = sandbox_settings(sandbox)
    providers.use_settings(s)
    yield s
    providers.use_settings(None)


def insert_event(conn, tenant_id, type_="order.paid", payload=None) -> uuid.UUID:
    """An outbox event row, written directly (the outbox module is another issue's)."""
    from psycopg.types.json import Jsonb
    from opsboard.schema import new_id
    eid = new_id()
    conn.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, payload) "
                 "VALUES (%s, %s, 1, 'order', 'o-1', %s, %s)", (eid, type_, tenant_id, Jsonb(payload or {"id": 1})))
    return eid
