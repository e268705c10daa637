"""Seeding helpers for the dashboard tests: jobs in every status, attempts, workers.

Jobs are enqueued through :mod:`opsboard.jobqueue`, then moved with plain SQL the
way the worker would have left them (a dead job goes dead in one UPDATE from
pending: the trigger only rejects updates of rows already dead).
"""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone

from opsboard import auth, jobqueue

_KEY_RE = re.compile(r'name="request_key" value="([^"]+)"')


def tenant(conn, slug: str | None = None) -> uuid.UUID:
    return auth.ensure_tenant(conn, slug or f"t-{uuid.uuid4().hex[:8]}")["id"]


def db_now(conn) -> datetime:
    return conn.execute("SELECT now() AS n").fetchone()["n"]


def jobs(conn, tenant_id, n: int = 1, type: str = "diag.noop", payload: dict | None = None, **kw) -> list[uuid.UUID]:
    """Enqueue ``n`` pending jobs; returns their ids (oldest first)."""
    return jobqueue.enqueue_many(conn, [jobqueue.NewJob(type, dict(payload or {}), tenant_id, **kw) for _ in range(n)])


def attempt(conn, job_id, outcome: str, code: str | None = None, detail: str | None = None,
            at: datetime | None = None, attempt_no: int = 1, worker: str = "host-1:100:abc") -> None:
    at = at or db_now(conn)
    conn.execute("""INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code,
                                              detail, duration_ms)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 12)""",
                 (job_id, attempt_no, worker, at - timedelta(milliseconds=12), at, outcome, code, detail))


def kill(conn, ids, code: str = "http_410", at: datetime | None = None, detail: str | None = None,
         with_attempt: bool = True) -> None:
    """Pending jobs -> dead with ``code``, finished at ``at``, with their last attempt."""
    ids = list(ids)
    at = at or db_now(conn)
    conn.execute("""UPDATE jobs SET status = 'dead', attempts = 1, last_error_code = %s, started_at = %s,
                                    finished_at = %s
                    WHERE id = ANY(%s) AND status = 'pending'""", (code, at - timedelta(seconds=1), at, ids))
    if with_attempt:
        for i in ids:
            attempt(conn, i, "dead", code, detail, at)


def fail(conn, ids, code: str = "http_503", at: datetime | None = None, detail: str | None = None) -> None:
    """Pending jobs -> retryable with ``code`` (one failed attempt at ``at``)."""
    ids = list(ids)
    at = at or db_now(conn)
    conn.execute("""UPDATE jobs SET status = 'retryable', attempts = 1, last_error_code = %s, started_at = %s,
                                    available_at = %s + interval '1 hour'
                    WHERE id = ANY(%s) AND status = 'pending'""", (code, at - timedelta(seconds=1), at, ids))
    for i in ids:
        attempt(conn, i, "retryable", code, detail, at)


def run(conn, ids, worker_id: str) -> None:
    """Pending jobs -> running under ``worker_id``."""
    conn.execute("""UPDATE jobs SET status = 'running', attempts = attempts + 1, locked_by = %s,
                                    locked_until = now() + interval '30 seconds', started_at = now()
                    WHERE id = ANY(%s)""", (worker_id, list(ids)))


def succeed(conn, ids) -> None:
    conn.execute("""UPDATE jobs SET status = 'succeeded', attempts = 1, started_at = now(), finished_at = now()
                    WHERE id = ANY(%s)""", (list(ids),))


def set_created(conn, job_id, at: datetime) -> None:
    conn.execute("UPDATE jobs SET created_at = %s WHERE id = %s", (at, job_id))


def worker(conn, worker_id: str, queues: dict[str, int], *, seen: datetime | None = None, leader: bool = False,
           state: str = "running", hostname: str = "host-1", pid: int = 100) -> None:
    conn.execute("""INSERT INTO workers (id, hostname, pid, queues, version, state, is_leader, running_jobs,
                                         started_at, last_seen_at)
                    VALUES (%s, %s, %s, %s, '0.1.0', %s, %s, 0, coalesce(%s, now()) - interval '1 hour',
                            coalesce(%s, now()))""",
                 (worker_id, hostname, pid, json.dumps(queues), state, leader, seen, seen))


def request_key(html: str) -> str:
    """The request key of the first action form in a page."""
    m = _KEY_RE.search(html)
    assert m, "no request_key field in the page"
    return m.group(1)


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)
