"""The durable job queue: enqueue, cancel, claim, record outcomes, replay.

Producers call :func:`enqueue` / :func:`enqueue_many` on their own connection,
inside their own transaction: the job exists exactly when their domain change
commits.  Workers call :func:`claim_batch` and :func:`record_outcomes`; the
dashboard calls :func:`replay`, :func:`replay_many` and :func:`cancel`.

Every enqueue wakes workers through ``NOTIFY opsboard_jobs`` (sent by a
statement-level trigger, so one per statement and queue; the server folds
identical notifications of one transaction into one).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import psycopg
from psycopg.types.json import Jsonb

from . import audit, db, jobtypes
from .auth import TenantScope
from .config import QUEUE_NAMES
from .errors import OpsError
from .schema import JobStatus, new_id

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


def _tenant_id(tenant) -> uuid.UUID:
    if isinstance(tenant, uuid.UUID):
        return tenant
    if isinstance(tenant, dict) and "id" in tenant:
        tenant = tenant["id"]
        if isinstance(tenant, uuid.UUID):
            return tenant
    try:
        return uuid.UUID(str(tenant))
    except ValueError:
        raise QueueError(f"tenant must be a tenant id, not {tenant!r}", "invalid_tenant") from None


def _prepare(job: NewJob, types: dict | None = None) -> dict:
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
    if job.expires_at is not None and job.run_at is not None and job.expires_at <= job.run_at:
        raise jobtypes.InvalidPayload("expires_at must be after run_at")
    # Checked here rather than by the database, whose error would abort the caller's transaction.
    if job.priority is not None and not -32768 <= int(job.priority) <= 32767:
        raise jobtypes.InvalidPayload("priority must be between -32768 and 32767")
    if job.max_attempts is not None and not 1 <= int(job.max_attempts) <= 1000:
        raise jobtypes.InvalidPayload("max_attempts must be between 1 and 1000")
    policy = jt.policy
    return {
        "id": new_id(), "type": jt.name, "version": jt.version, "tenant_id": _tenant_id(job.tenant),
        "queue": job.queue or policy.queue,
        "priority": policy.priority if job.priority is None else int(job.priority),
        "idempotency_key": job.idempotency_key, "group_key": job.group_key, "payload": job.payload,
        "max_attempts": job.max_attempts or policy.max_attempts, "run_at": job.run_at,
        "expires_at": job.expires_at, "correlation_id": job.correlation_id, "event_id": job.event_id,
        "payload_json": payload_json,
    }


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_ROW = ('{"id":"%s","type":%s,"version":%d,"tenant_id":"%s","queue":"%s","priority":%d,"idempotency_key":%s,'
        '"group_key":%s,"max_attempts":%d,"run_at":%s,"expires_at":%s,"correlation_id":%s,"event_id":%s,'
        '"payload":%s}')


_ROW_PLAIN = '{"id":"%s","type":%s,"version":%d,"tenant_id":"%s","queue":"%s","priority":%d,"max_attempts":%d,"payload":%s}'
#: Job type names as JSON strings (the registry's names: a small, fixed set).
_TYPE_JSON: dict[str, str] = {}


def _json_or_null(value) -> str:
    return "null" if value is None else _ENCODE(str(value))


def _row_json(r: dict) -> str:
    """One job as a JSON object for job_insert_many, splicing in the payload's JSON text.

    Hand-formatted because this runs once per job on the bulk path: ids (as 32
    hex digits, which PostgreSQL reads as uuids; cheaper than ``str``), numbers
    and the queue name are safe as they are; every free-form string is encoded.
    """
    type_json = _TYPE_JSON.get(r["type"])
    if type_json is None:
        type_json = _TYPE_JSON[r["type"]] = _ENCODE(r["type"])
    if (r["idempotency_key"] is None and r["group_key"] is None and r["run_at"] is None and r["expires_at"] is None
            and r["correlation_id"] is None and r["event_id"] is None):
        # The common job: keys left out read as NULL (jsonb_to_recordset), a shorter document.
        return _ROW_PLAIN % (r["id"].hex, type_json, r["version"], r["tenant_id"].hex, r["queue"], r["priority"],
                             r["max_attempts"], r["payload_json"])
    return _ROW % (r["id"].hex, type_json, r["version"], r["tenant_id"].hex, r["queue"], r["priority"],
                   _json_or_null(r["idempotency_key"]), _json_or_null(r["group_key"]), r["max_attempts"],
                   _json_or_null(_iso(r["run_at"])), _json_or_null(_iso(r["expires_at"])),
                   _json_or_null(r["correlation_id"]), _json_or_null(r["event_id"]), r["payload_json"])


def _insert_one(conn: psycopg.Connection, row: dict) -> dict | None:
    """Run job_insert; the new job's whole row (as ``SELECT *`` reads it), or ``None`` on a live idempotency key.

    job_insert returns only what the database decides (the times) or
    converts (payload, ids, correlation id); the rest is what was sent and
    what a new row holds.  tests/integration/test_queue_tenant_integrity.py
    checks the result against ``SELECT *``, so a column added to jobs cannot
    be missed here.
    """
    got = db.one(conn, "job_insert", row)
    if got is None:
        return None
    return {
        "id": row["id"], "type": row["type"], "version": row["version"], "tenant_id": row["tenant_id"],
        "queue": row["queue"], "priority": row["priority"], "idempotency_key": row["idempotency_key"],
        "group_key": row["group_key"], "payload": got["payload"], "status": JobStatus.PENDING.value, "attempts": 0,
        "max_attempts": row["max_attempts"], "available_at": got["available_at"], "expires_at": got["expires_at"],
        "locked_by": None, "locked_until": None, "last_error_code": None, "correlation_id": got["correlation_id"],
        "event_id": got["event_id"], "replay_of": got["replay_of"], "created_at": got["created_at"],
        "started_at": None, "finished_at": None,
    }


def enqueue(conn: psycopg.Connection, type: str, payload: dict, *, tenant, version: int = 1,
            idempotency_key: str | None = None, group_key: str | None = None, run_at: datetime | None = None,
            expires_at: datetime | None = None, correlation_id: str | None = None, event_id=None,
            priority: int | None = None, queue: str | None = None, max_attempts: int | None = None,
            replay_of=None) -> dict:
    """Enqueue one job in the caller's transaction and return its row.

    With an ``idempotency_key`` that a live (not dead) job of the same tenant
    and type already holds, nothing is written and that job is returned.
    Raises :class:`~opsboard.jobtypes.UnknownJobType` or
    :class:`~opsboard.jobtypes.InvalidPayload` before writing anything.
    """
    row = _prepare(NewJob(type, payload, tenant, version, idempotency_key, group_key, run_at, expires_at,
                          correlation_id, event_id, priority, queue, max_attempts))
    row["payload"] = Jsonb(row["payload"])
    row["replay_of"] = replay_of
    inserted = _insert_one(conn, row)
    if inserted is not None:
        return inserted
    existing = db.one(conn, "job_get_live_by_key", row)
    if existing is None:  # the holder died between the two statements: try once more
        inserted = _insert_one(conn, row)
        if inserted is None:
            raise QueueError("idempotency key is contended; retry", "idempotency_conflict")
        return inserted
    return existing


def enqueue_many(conn: psycopg.Connection, jobs: Sequence[NewJob]) -> list[uuid.UUID]:
    """Enqueue many jobs in one statement; returns each job's id, in order.

    Every job is validated first; one invalid job rejects the whole batch.  A
    job whose idempotency key is live returns the existing job's id.
    """
    types: dict = {}
    rows = [_prepare(j, types) for j in jobs]
    if not rows:
        return []
    if conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF and not any(
            r["idempotency_key"] is not None or r["run_at"] is not None for r in rows):
        # No key can conflict: COPY, about 30% faster than the INSERT below
        # for 1,000 jobs (no JSON document to build and parse, multi-row heap
        # inserts).  The statement trigger checks tenants and notifies as for
        # an INSERT.  (COPY cannot take now() for a job's run_at, nor run in
        # pipeline mode.)
        _copy_jobs(conn, rows)
        return [r["id"] for r in rows]
    doc = "[" + ",".join(_row_json(r) for r in rows) + "]"
    inserted = {r["id"] for r in db.all_rows(conn, "job_insert_many", {"rows": doc})}
    result = []
    for r in rows:
        if r["id"] in inserted:
            result.append(r["id"])
        else:
            existing = db.one(conn, "job_get_live_by_key", r)
            if existing is None:
                raise QueueError("idempotency key is contended; retry", "idempotency_conflict")
            result.append(existing["id"])
    return result


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
    for r in rows:
        payload = r["payload_json"]
        if "\\" in payload:  # JSON text has no raw tab, newline or CR; its escapes are backslashes
            payload = payload.replace("\\", "\\\\")
        if (r["group_key"] is None and r["expires_at"] is None and r["correlation_id"] is None
                and r["event_id"] is None):
            lines.append(f'{r["id"].hex}\t{_copy_text(r["type"])}\t{r["version"]}\t{r["tenant_id"].hex}\t'
                         f'{r["queue"]}\t{r["priority"]}\t\\N\t{payload}\t{r["max_attempts"]}\t\\N\t\\N\t\\N\n')
        else:
            lines.append(f'{r["id"].hex}\t{_copy_text(r["type"])}\t{r["version"]}\t{r["tenant_id"].hex}\t'
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


def get_job(conn: psycopg.Connection, job_id, scope: TenantScope = ALL_TENANTS) -> dict | None:
    """One job inside ``scope``, or ``None``."""
    try:
        jid = uuid.UUID(str(job_id))
    except ValueError:
        return None
    return db.one(conn, "job_get", {"id": jid, **scope.params})


def attempts(conn: psycopg.Connection, job_id) -> list[dict]:
    """Every attempt of a job, oldest first."""
    return db.all_rows(conn, "job_attempts_list", {"job_id": job_id})


def _job_uuid(job_id) -> uuid.UUID:
    try:
        return uuid.UUID(str(job_id))
    except ValueError:
        raise QueueError("no such job", "not_found") from None


def cancel(conn: psycopg.Connection, job_id, *, actor: audit.Actor | None = None, reason: str | None = None,
           scope: TenantScope = ALL_TENANTS, request_key: str | None = None, now: datetime | None = None) -> dict:
    """Cancel a pending or retryable job and return it.

    With an ``actor`` it is an operator action (:func:`opsboard.audit.operator_action`):
    a reason is required, it is audited as ``job.cancel`` and idempotent on
    ``request_key``.  Without one (a producer's own cancel) nothing is audited.
    """
    jid = _job_uuid(job_id)

    def perform(ctx: audit.ActionContext | None) -> dict:
        # Locked first: the audit row records the status actually cancelled
        # (pending or retryable), no claim can take the job meanwhile, and an
        # identical request arriving at the same moment waits here, then
        # finds the first one's audit row and returns its result.
        current = db.one(conn, "job_get_for_update", {"id": jid, **scope.params})
        if current is None:
            raise QueueError("no such job", "not_found")
        row = db.one(conn, "job_cancel", {"id": jid, "now": now, **scope.params})
        if row is None:
            raise QueueError(f"only pending or retryable jobs can be cancelled; this one is {current['status']}",
                             "invalid_status")
        if ctx is not None:
            ctx.write(tenant_id=row["tenant_id"], before={"status": current["status"]},
                      after={"status": "cancelled"})
        return row

    if actor is None:
        with conn.transaction():
            return perform(None)
    return audit.operator_action(
        conn, actor, "job.cancel", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_job(conn, jid, scope) or {})


# ---------------------------------------------------------------- worker side

ZERO_TENANT = uuid.UUID(int=0)


@dataclass
class Claim:
    """A claimed batch and the round-robin cursor for the next claim."""

    rows: list[dict]
    next_after_tenant: uuid.UUID = ZERO_TENANT


def claim_params(queue: str, worker_id: str, limit: int, lease_seconds: float, *,
                 after_tenant: uuid.UUID | None = None, max_tenants: int | None = None,
                 now: datetime | None = None) -> dict:
    """The parameters of ``job_claim_many`` for one claim (see :func:`claim`)."""
    limits = jobtypes.concurrency_limits(queue)
    return {"queue": queue, "worker": worker_id, "limit": limit, "lease": lease_seconds, "now": now,
            "after_tenant": after_tenant or ZERO_TENANT, "max_tenants": max_tenants or max(1, limit),
            "limit_types": list(limits.types), "limit_type_limits": list(limits.type_limits),
            "limit_type_groups": list(limits.type_groups), "limit_groups": list(limits.groups),
            "limit_group_limits": list(limits.group_limits)}


def claim(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float, *,
          after_tenant: uuid.UUID | None = None, max_tenants: int | None = None,
          now: datetime | None = None) -> Claim:
    """Claim up to ``limit`` ready jobs of ``queue``, fairly across tenants, in one short transaction.

    Tenants with due work are visited round-robin from ``after_tenant`` (pass
    back ``next_after_tenant``); each gives at most its weighted share.  When
    the queue has job types or providers with concurrency limits, the claim
    first takes their advisory locks so that check-and-claim is atomic across
    every worker on every host.
    """
    if limit <= 0:
        return Claim([], after_tenant or ZERO_TENANT)
    limits = jobtypes.concurrency_limits(queue)
    max_tenants = max_tenants or max(1, limit)
    params = claim_params(queue, worker_id, limit, lease_seconds, after_tenant=after_tenant,
                          max_tenants=max_tenants, now=now)

    def run() -> list[dict]:
        rows = db.all_rows(conn, "job_claim_many", params)
        if not rows and params["after_tenant"] != ZERO_TENANT:
            # The walk started after the last tenant with due work: wrap around
            # now, or a worker with one free slot idles a whole poll interval
            # every other claim.
            rows = db.all_rows(conn, "job_claim_many", {**params, "after_tenant": ZERO_TENANT})
        return rows

    if limits.empty and conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # No advisory lock to hold: each statement is its own short transaction
        # (the wrap-around claim is a claim of its own), without the BEGIN and
        # COMMIT round trips.
        rows = run()
    elif conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE \
            and psycopg.Pipeline.is_supported():
        # The limit locks: BEGIN, the locks, the claim and COMMIT go out in one
        # round trip (pipeline mode; the rows are read after it), so the locks
        # are held only while the server works, never while this process
        # waits for its turn to read an answer.  Still separate statements:
        # the claim's snapshot is taken after the locks are held.
        # (Explicit BEGIN/COMMIT: psycopg's transaction() syncs on entering
        # and on leaving, three round trips.)
        def locked_claim(p: dict) -> list[dict]:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    db.execute(conn, "job_claim_lock_limits", {"names": list(limits.lock_names)})
                    cur = db.execute(conn, "job_claim_many", p)
                    conn.execute("COMMIT")
            except BaseException:
                # A failed statement leaves the explicit transaction aborted (the
                # COMMIT behind it was skipped): end it before the pool gets the connection.
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                raise
            return cur.fetchall()

        rows = locked_claim(params)
        if not rows and params["after_tenant"] != ZERO_TENANT:
            rows = locked_claim({**params, "after_tenant": ZERO_TENANT})  # the wrap-around (see run)
    else:
        with conn.transaction():
            if not limits.empty:
                db.execute(conn, "job_claim_lock_limits", {"names": list(limits.lock_names)})
            rows = run()
    if not rows:
        return Claim([], ZERO_TENANT)
    seen, last = rows[0].pop("tenants_seen"), rows[0].pop("last_tenant")
    for r in rows[1:]:
        r.pop("tenants_seen", None)
        r.pop("last_tenant", None)
    # Visited as many tenants as allowed: continue after the last one next time;
    # otherwise the walk reached the end of the tenants: wrap around.
    nxt = uuid.UUID(last) if seen >= max_tenants and last else ZERO_TENANT
    return Claim(rows, nxt)


def claim_batch(conn: psycopg.Connection, queue: str, worker_id: str, limit: int, lease_seconds: float,
                now: datetime | None = None) -> list[dict]:
    """Claim up to ``limit`` ready jobs of ``queue`` (see :func:`claim`), without a cursor."""
    return claim(conn, queue, worker_id, limit, lease_seconds, now=now).rows


@dataclass
class OutcomeRecord:
    """One decided outcome, ready to be written by :func:`record_outcomes`."""

    job_id: uuid.UUID
    token: int            # the attempt number taken at claim (fencing token)
    kind: str             # succeeded | retryable | dead | snoozed | released
    started_at: datetime
    duration_ms: int = 0
    delay: float = 0.0
    code: str | None = None
    detail: str | None = None
    has_effects: bool = False


def record_outcomes(conn: psycopg.Connection, worker_id: str, outcomes: Iterable[OutcomeRecord],
                    now: datetime | None = None) -> set[uuid.UUID]:
    """Write many outcomes in one statement; returns the ids actually applied.

    An outcome applies only while the job is ``running`` under this worker's
    fencing token; the others (lease lost, job reclaimed) are ignored.
    """
    outcomes = list(outcomes)
    if not outcomes:
        return set()
    params = {
        "worker": worker_id, "now": now,
        "ids": [o.job_id for o in outcomes], "tokens": [o.token for o in outcomes],
        "kinds": [o.kind for o in outcomes], "delays": [float(o.delay) for o in outcomes],
        "codes": [o.code for o in outcomes], "details": [o.detail for o in outcomes],
        "started": [o.started_at for o in outcomes], "durations": [int(o.duration_ms) for o in outcomes],
        "effect_job_ids": [o.job_id for o in outcomes if o.has_effects and o.kind == "succeeded"],
    }
    return {r["id"] for r in db.all_rows(conn, "job_record_outcomes", params)}


def heartbeat(conn: psycopg.Connection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]],
              lease_seconds: float, now: datetime | None = None) -> set[uuid.UUID]:
    """Extend the leases of jobs still held; returns the ids whose lease was extended."""
    if not held:
        return set()
    rows = db.all_rows(conn, "job_heartbeat_many", {
        "ids": [h[0] for h in held], "tokens": [h[1] for h in held], "worker": worker_id,
        "lease": lease_seconds, "now": now})
    return {r["id"] for r in rows}


def begin_effect(conn: psycopg.Connection, key: str, job: dict, provider: str, *, relaxed: bool = False) -> dict:
    """Record an external effect as started, or return the existing record.

    The returned row has ``created`` true for a new record.  A row that exists
    and is ``started`` means an earlier attempt (or the dead job this one
    replays) may have reached the provider: reconcile before sending again; the
    row now belongs to this job, so this job's success confirms it.
    ``confirmed`` means it happened: do not send again.  Confirmation happens
    in :func:`record_outcomes`, in the transaction that marks the job succeeded.

    ``relaxed`` (the job type's ``relaxed_effects``: its started effects are
    reconciled by sending again with the same id, as webhooks are) writes the
    ``started`` row without waiting for the WAL flush (``synchronous_commit =
    off`` for that one transaction): losing it in a server crash changes
    nothing, the retry sends again either way.  ``confirmed`` is still written
    durably with the job's success.
    """
    params = {"key": key, "job_id": job["id"], "tenant_id": job["tenant_id"], "provider": provider}
    if relaxed and conn.autocommit and conn.info.transaction_status == 0:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            row = db.one(conn, "effect_begin", params)
    else:
        row = db.one(conn, "effect_begin", params)
    if row is None:
        raise QueueError("this effect key belongs to another tenant", "effect_key_conflict")
    return row


def set_effect_ref(conn: psycopg.Connection, key: str, job: dict, ref: str) -> dict | None:
    """Remember the provider's reference (message id...) of a started effect, for reconciliation."""
    return db.one(conn, "effect_set_ref", {"key": key, "job_id": job["id"], "tenant_id": job["tenant_id"],
                                           "ref": ref})


# ---------------------------------------------------------------- replay

def replay(conn: psycopg.Connection, job_id, actor: audit.Actor, reason: str, request_key: str | None,
           *, scope: TenantScope = ALL_TENANTS) -> dict:
    """Replay a dead job: a new job with its payload and ``replay_of``, plus an audit row.

    An operator action (:func:`opsboard.audit.operator_action`), audited as
    ``job.replay``: a reason is required; the same ``request_key`` returns the
    job the first request created (a key used for another job raises
    ``request_key_reused``).  Only dead jobs can be replayed; the dead job is
    not touched.  When the dead job's idempotency key is held by a live job
    again, that job is the replay and the audit row names it.
    """
    audit.checked_reason(reason)
    jid = _job_uuid(job_id)

    def perform(ctx: audit.ActionContext) -> dict:
        dead = get_job(conn, jid, scope)
        if dead is None:
            raise QueueError("no such job", "not_found")
        if dead["status"] != JobStatus.DEAD.value:
            raise QueueError(f"only dead jobs can be replayed; this one is {dead['status']}", "invalid_status")
        row = {
            "id": new_id(), "type": dead["type"], "version": dead["version"], "tenant_id": dead["tenant_id"],
            "queue": dead["queue"], "priority": dead["priority"], "idempotency_key": dead["idempotency_key"],
            "group_key": dead["group_key"], "payload": Jsonb(dead["payload"]), "max_attempts": dead["max_attempts"],
            "run_at": None, "expires_at": None, "correlation_id": dead["correlation_id"],
            "event_id": dead["event_id"], "replay_of": dead["id"],
        }
        # The job first, then the audit row naming it: a concurrent identical
        # request waits on the audit row's unique request key, then finds it
        # and its own job is undone.
        inserted = _insert_one(conn, row)
        if inserted is None:
            # The idempotency key is held by a live job (an earlier replay,
            # or the producer enqueued it again): that job is the replay.
            inserted = db.one(conn, "job_get_live_by_key", row)
        ctx.write(tenant_id=dead["tenant_id"],
                  before={"status": "dead", "last_error_code": dead["last_error_code"]},
                  after={"job_id": str(inserted["id"])})
        return inserted

    return audit.operator_action(
        conn, actor, "job.replay", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform, repeat=lambda previous: get_job(conn, previous["after"]["job_id"], scope) or {})


@dataclass
class DeadFilter:
    type: str | None = None
    queue: str | None = None
    tenant_id: Any = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: Only dead jobs not yet replayed, resolved or ignored (the dashboard's "open" dead letters).
    open_only: bool = False


@dataclass
class BulkReplay:
    replayed: list[dict] = field(default_factory=list)
    #: All dead jobs matching the filter; at most ``limit`` of them were replayed.
    matched: int = 0


def replay_many(conn: psycopg.Connection, filter: DeadFilter, actor: audit.Actor, reason: str,
                request_key: str | None, *, scope: TenantScope = ALL_TENANTS, limit: int = 1000) -> BulkReplay:
    """Replay every dead job matching ``filter`` (at most ``limit``), one audit row each.

    Idempotent on ``request_key``: each job's replay uses ``request_key:job_id``.
    """
    rows = db.all_rows(conn, "job_dead_select", {
        **scope.params, "type": filter.type, "queue": filter.queue, "tenant_id": filter.tenant_id,
        "error_code": filter.error_code, "since": filter.since, "until": filter.until,
        "open_only": filter.open_only, "limit": limit})
    result = BulkReplay(matched=rows[0]["matched"] if rows else 0)
    for r in rows:
        key = f"{request_key}:{r['id']}" if request_key else None
        result.replayed.append(replay(conn, r["id"], actor, reason, key, scope=scope))
    return result
