"""Enqueue: one job or many, in the producer's transaction, each checked against its job type first.

Every enqueue wakes workers through ``NOTIFY opsboard_jobs`` (sent by a
statement-level trigger, so one per statement and queue; the server folds
identical notifications of one transaction into one).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from .. import db, jobtypes
from ..auth import TenantScope
from ..config import QUEUE_NAMES
from ..errors import OpsError
from ..schema import JobStatus, new_id


ALL_TENANTS = TenantScope(all=True)


#: The queue's refusals are the core's one error type (kept under its old name).
QueueError = OpsError


@dataclass
class NewJob:
    """One job for :func:`enqueue_many`."""

    type: str
    payload: dict
    tenant: Any
    version: int = 1
    idempotency_key: str | None = None
    group_key: str | None = None
    run_at: datetime | None = None
    expires_at: datetime | None = None
    correlation_id: str | None = None
    event_id: Any = None
    priority: int | None = None
    queue: str | None = None
    max_attempts: int | None = None
    #: The W3C trace context the job continues (:mod:`opsboard.tracing`'s stored form), or None.
    trace_context: str | None = None


def tenant_id_of(tenant) -> uuid.UUID:
    if isinstance(tenant, uuid.UUID):
        return tenant
    if isinstance(tenant, dict) and "id" in tenant:
        tenant = tenant["id"]
        if isinstance(tenant, uuid.UUID):
            return tenant
    try:
        return uuid.UUID(str(tenant))
    except ValueError:
        raise OpsError("tenant must be a tenant id, not %(tenant)s", "invalid_tenant",
                       params={"tenant": repr(tenant)}) from None


def prepare_row(job: NewJob, types: dict | None = None) -> dict:
    """Validate against the registry and resolve the policy: raises before any write.

    ``types`` caches the registry's answers across one batch.
    """
    if types is None:
        jt = jobtypes.get(job.type, job.version)
    else:
        jt = types.get((job.type, job.version))
        if jt is None:
            jt = types[(job.type, job.version)] = jobtypes.get(job.type, job.version)
    payload_json = jobtypes.validate_json(jt, job.payload)
    if job.idempotency_key is not None and not (0 < len(job.idempotency_key) <= 200):
        raise jobtypes.InvalidPayload("idempotency_key must be 1 to 200 characters")
    if job.group_key is not None and not (0 < len(job.group_key) <= 200):
        raise jobtypes.InvalidPayload("group_key must be 1 to 200 characters")
    if job.queue is not None and job.queue not in QUEUE_NAMES:
        raise jobtypes.InvalidPayload(f"queue {job.queue!r} is not one of {', '.join(QUEUE_NAMES)}")
    if job.run_at is not None or job.expires_at is not None:  # most jobs have neither (the bulk path)
        _check_times(job)
    if job.expires_at is not None and job.run_at is not None and job.expires_at <= job.run_at:
        raise jobtypes.InvalidPayload("expires_at must be after run_at")
    # Checked here rather than by the database, whose error would abort the caller's transaction.
    if job.priority is not None and not -32768 <= int(job.priority) <= 32767:
        raise jobtypes.InvalidPayload("priority must be between -32768 and 32767")
    if job.max_attempts is not None and not 1 <= int(job.max_attempts) <= 1000:
        raise jobtypes.InvalidPayload("max_attempts must be between 1 and 1000")
    policy = jt.policy
    tenant_id = tenant_id_of(job.tenant)
    key = None
    if jt.concurrency_key is not None:
        # The job's concurrency key (issue 50), computed once here and stored: the claim counts a key's
        # running jobs by it (jobs_running_key_idx) and never reads payloads.
        key = jt.concurrency_key(job.payload, tenant_id)
        if key is not None:
            key = str(key)
            if not 0 < len(key) <= 200:
                raise jobtypes.InvalidPayload("a concurrency key must be 1 to 200 characters")
    return {
        "id": new_id(), "type": jt.name, "version": jt.version, "tenant_id": tenant_id,
        "queue": job.queue or policy.queue,
        "priority": policy.priority if job.priority is None else int(job.priority),
        "idempotency_key": job.idempotency_key, "group_key": job.group_key, "payload": job.payload,
        "max_attempts": job.max_attempts or policy.max_attempts, "run_at": job.run_at,
        "expires_at": job.expires_at, "correlation_id": job.correlation_id, "event_id": job.event_id,
        "payload_json": payload_json, "trace_context": job.trace_context, "concurrency_key": key,
    }


def _check_times(job: NewJob) -> None:
    for name, moment in (("run_at", job.run_at), ("expires_at", job.expires_at)):
        if moment is not None and (moment.tzinfo is None or moment.utcoffset() is None):
            # A naive time would be read in the session's time zone: refuse it.
            raise jobtypes.InvalidPayload(f"{name} must be timezone-aware")
        if moment is not None:
            try:
                # 9999-12-31T23:59:59-14:00 is a valid ISO time but lies past datetime.max in UTC: comparing or
                # storing it would raise OverflowError (a 500) instead of this refusal.
                moment.astimezone(timezone.utc)
            except OverflowError:
                raise jobtypes.InvalidPayload(f"{name} is out of range (years 1 to 9999 in UTC)") from None


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


_ROW = ('{"id":"%s","type":%s,"version":%d,"tenant_id":"%s","queue":"%s","priority":%d,"idempotency_key":%s,'
        '"group_key":%s,"max_attempts":%d,"run_at":%s,"expires_at":%s,"correlation_id":%s,"event_id":%s,'
        '"trace_context":%s,"concurrency_key":%s,"payload":%s}')


_ROW_PLAIN = '{"id":"%s","type":%s,"version":%d,"tenant_id":"%s","queue":"%s","priority":%d,"max_attempts":%d,"payload":%s}'


#: Job type names as JSON strings (the registry's names: a small, fixed set).
_TYPE_JSON: dict[str, str] = {}


def _json_or_null(value) -> str:
    return "null" if value is None else _ENCODE(str(value))


def row_json(r: dict) -> str:
    """One job as a JSON object for job_insert_many, splicing in the payload's JSON text.

    Hand-formatted because this runs once per job on the bulk path: ids (as 32
    hex digits, which PostgreSQL reads as uuids; cheaper than ``str``), numbers
    and the queue name are safe as they are; every free-form string is encoded.
    """
    type_json = _TYPE_JSON.get(r["type"])
    if type_json is None:
        type_json = _TYPE_JSON[r["type"]] = _ENCODE(r["type"])
    if (r["idempotency_key"] is None and r["group_key"] is None and r["run_at"] is None and r["expires_at"] is None
            and r["correlation_id"] is None and r["event_id"] is None and r.get("trace_context") is None
            and r.get("concurrency_key") is None):
        # The common job: keys left out read as NULL (jsonb_to_recordset), a shorter document.
        return _ROW_PLAIN % (r["id"].hex, type_json, r["version"], r["tenant_id"].hex, r["queue"], r["priority"],
                             r["max_attempts"], r["payload_json"])
    return _ROW % (r["id"].hex, type_json, r["version"], r["tenant_id"].hex, r["queue"], r["priority"],
                   _json_or_null(r["idempotency_key"]), _json_or_null(r["group_key"]), r["max_attempts"],
                   _json_or_null(_iso(r["run_at"])), _json_or_null(_iso(r["expires_at"])),
                   _json_or_null(r["correlation_id"]), _json_or_null(r["event_id"]),
                   _json_or_null(r.get("trace_context")), _json_or_null(r.get("concurrency_key")), r["payload_json"])


#: Where :func:`_insert_one` keeps its cursor on a connection (see :func:`_insert_one`).
_CURSOR = "_opsboard_enqueue_cursor"


def _insert_one(conn: psycopg.Connection, row: dict) -> dict | None:
    """Run job_insert; the new job's whole row (as ``SELECT *`` reads it), or ``None`` on a live idempotency key.

    job_insert returns only the time (``created_at``, also ``available_at``
    without a run_at) and the payload as jsonb stores it; the rest is what was
    sent, converted here as the database converts it, and what a new row
    holds.  tests/integration/test_queue_tenant_integrity.py checks the result
    against ``SELECT *`` (values and types), so a column added to jobs cannot
    be missed here.

    The statement runs on a cursor kept on the connection across calls: a new
    cursor per call (``conn.execute``) built a new adapter map and looked up
    each parameter's dumper and each column's loader again, a visible share of
    the producer's CPU per enqueue (`opsboard bench --scenario enqueue_cost`).  The cursor is taken off the connection while
    it runs, so two threads sharing a connection never share it (the second
    makes its own for that call).
    """
    row.setdefault("concurrency_key", None)   # a row built without prepare_row (issue 50's column)
    cur = conn.__dict__.pop(_CURSOR, None)
    if cur is None or cur.closed:
        cur = conn.cursor(row_factory=tuple_row)
    try:
        cur.execute(db.queries["job_insert" if row["idempotency_key"] is not None else "job_insert_new"], row)
        got = cur.fetchone()
    finally:
        conn.__dict__[_CURSOR] = cur
    if got is None:
        return None
    payload, created_at = got
    zone = created_at.tzinfo  # the session's time zone, in which the database returns every timestamptz
    return {
        "id": row["id"], "type": row["type"], "version": row["version"], "tenant_id": row["tenant_id"],
        "queue": row["queue"], "priority": row["priority"], "idempotency_key": row["idempotency_key"],
        "group_key": row["group_key"], "payload": payload, "status": JobStatus.PENDING.value, "attempts": 0,
        "max_attempts": row["max_attempts"],
        "available_at": created_at if row["run_at"] is None else row["run_at"].astimezone(zone),
        "expires_at": None if row["expires_at"] is None else row["expires_at"].astimezone(zone),
        "locked_by": None, "locked_until": None, "last_error_code": None,
        "correlation_id": _as_text(row["correlation_id"]), "event_id": _as_uuid(row["event_id"]),
        "replay_of": _as_uuid(row["replay_of"]), "created_at": created_at, "started_at": None, "finished_at": None,
        "trace_context": _as_text(row["trace_context"]),
        "result": None, "concurrency_key": row.get("concurrency_key"),
    }


def _as_text(value) -> str | None:
    """A value as a text column stores it (the database accepted it, so ``str`` is its text form)."""
    return value if value is None or type(value) is str else str(value)


def _as_uuid(value) -> uuid.UUID | None:
    """A value as a uuid column returns it (the database accepted it, so it parses)."""
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def enqueue(conn: psycopg.Connection, type: str, payload: dict, *, tenant, version: int = 1,
            idempotency_key: str | None = None, group_key: str | None = None, run_at: datetime | None = None,
            expires_at: datetime | None = None, correlation_id: str | None = None, event_id=None,
            priority: int | None = None, queue: str | None = None, max_attempts: int | None = None,
            replay_of=None, trace_context: str | None = None) -> dict:
    """Enqueue one job in the caller's transaction and return its row.

    With an ``idempotency_key`` that a live (not dead) job of the same tenant
    and type already holds, nothing is written and that job is returned.
    Raises :class:`~opsboard.jobtypes.UnknownJobType` or
    :class:`~opsboard.jobtypes.InvalidPayload` before writing anything.
    """
    row = prepare_row(NewJob(type, payload, tenant, version, idempotency_key, group_key, run_at, expires_at,
                          correlation_id, event_id, priority, queue, max_attempts, trace_context))
    row["payload"] = Jsonb(row["payload"])
    row["replay_of"] = replay_of
    inserted = _insert_one(conn, row)
    if inserted is not None:
        return inserted
    existing = db.one(conn, "job_get_live_by_key", row)
    if existing is None:  # the holder died between the two statements: try once more
        inserted = _insert_one(conn, row)
        if inserted is None:
            raise OpsError("idempotency key is contended; retry", "idempotency_conflict")
        return inserted
    return existing


def enqueue_many(conn: psycopg.Connection, jobs: Sequence[NewJob]) -> list[uuid.UUID]:
    """Enqueue many jobs in one statement; returns each job's id, in order.

    Every job is validated first; one invalid job rejects the whole batch.  A
    job whose idempotency key is live returns the existing job's id.
    """
    types: dict = {}
    rows = [prepare_row(j, types) for j in jobs]
    if not rows:
        return []
    if conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF and not any(
            r["idempotency_key"] is not None or r["run_at"] is not None or r["trace_context"] is not None
            or r["concurrency_key"] is not None for r in rows) and _copy_allowed(conn):
        # No key can conflict: COPY, faster than the INSERT below for a batch
        # (no JSON document to build and parse, multi-row heap inserts;
        # `opsboard bench --scenario enqueue_many`).  The statement trigger checks tenants and notifies as for
        # an INSERT.  (COPY cannot take now() for a job's run_at, nor run in
        # pipeline mode; it leaves trace_context out, rare enough to take the INSERT.)
        _copy_jobs(conn, rows)
        return [r["id"] for r in rows]
    doc = "[" + ",".join(row_json(r) for r in rows) + "]"
    inserted = {r["id"] for r in db.all_rows(conn, "job_insert_many", {"rows": doc})}
    result = []
    for r in rows:
        if r["id"] in inserted:
            result.append(r["id"])
        else:
            existing = db.one(conn, "job_get_live_by_key", r)
            if existing is None:
                raise OpsError("idempotency key is contended; retry", "idempotency_conflict")
            result.append(existing["id"])
    return result


def _copy_allowed(conn: psycopg.Connection) -> bool:
    """Whether COPY may write ``jobs`` on this connection: PostgreSQL refuses COPY FROM into a table
    whose row-level security holds the role (the application role: migration 0085), so such a
    connection takes the INSERT.  Asked once per connection."""
    allowed = getattr(conn, "_opsboard_copy_allowed", None)
    if allowed is None:
        row = conn.execute("SELECT NOT row_security_active('jobs') AS ok").fetchone()
        allowed = bool(row["ok"] if isinstance(row, dict) else row[0])
        try:
            conn._opsboard_copy_allowed = allowed
        except AttributeError:  # a connection class without a __dict__: ask again next time
            pass
    return allowed


# Here rather than in sql/jobs.sql: a COPY cannot be prepared (test_queries_prepare prepares every named query).
_COPY_JOBS = ("COPY jobs (id, type, version, tenant_id, queue, priority, group_key, payload, max_attempts, "
              "expires_at, correlation_id, event_id) FROM STDIN")


def _copy_text(value) -> str:
    """A value as a field of COPY's text format (``\\N`` for NULL; backslash, tab, newline, CR escaped)."""
    if value is None:
        return "\\N"
    text = value if isinstance(value, str) else str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def _copy_jobs(conn: psycopg.Connection, rows: list[dict]) -> None:
    """Insert prepared jobs (none with an idempotency key or a run_at) with one COPY."""
    lines = []
    hexes: dict = {}  # tenant id -> its 32 hex digits: a batch names few tenants, each many times
    for r in rows:
        tenant = hexes.get(r["tenant_id"])
        if tenant is None:
            tenant = hexes[r["tenant_id"]] = r["tenant_id"].hex
        payload = r["payload_json"]
        if "\\" in payload:  # JSON text has no raw tab, newline or CR; its escapes are backslashes
            payload = payload.replace("\\", "\\\\")
        if (r["group_key"] is None and r["expires_at"] is None and r["correlation_id"] is None
                and r["event_id"] is None):
            lines.append(f'{r["id"].hex}\t{_copy_text(r["type"])}\t{r["version"]}\t{tenant}\t'
                         f'{r["queue"]}\t{r["priority"]}\t\\N\t{payload}\t{r["max_attempts"]}\t\\N\t\\N\t\\N\n')
        else:
            lines.append(f'{r["id"].hex}\t{_copy_text(r["type"])}\t{r["version"]}\t{tenant}\t'
                         f'{r["queue"]}\t{r["priority"]}\t{_copy_text(r["group_key"])}\t{payload}\t'
                         f'{r["max_attempts"]}\t{_copy_text(_iso(r["expires_at"]))}\t'
                         f'{_copy_text(r["correlation_id"])}\t{_copy_text(r["event_id"])}\n')
    with conn.cursor() as cur, cur.copy(_COPY_JOBS) as copy:
        copy.write("".join(lines))


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        raise jobtypes.InvalidPayload("run_at and expires_at must be timezone-aware")
    return moment.isoformat()
