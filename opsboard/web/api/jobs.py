"""POST /api/v1/jobs (enqueue) and GET /api/v1/jobs/{id} (status), for the caller's tenant."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from flask import request

from ... import jobqueue, jobtypes, tracing
from ...auth import TenantScope
from ..context import get_db
from .blueprint import bp
from .common import Problem, authenticate, correlation_id, field, json_object, only_fields, respond

_FIELDS = ("id", "type", "version", "status", "queue", "priority", "attempts", "max_attempts", "idempotency_key",
           "group_key", "correlation_id", "event_id", "last_error_code", "created_at", "available_at",
           "started_at", "finished_at", "expires_at", "payload")


def job_json(row: dict) -> dict:
    out = {}
    for name in _FIELDS:
        value = row.get(name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif name in ("id", "event_id") and value is not None:
            value = str(value)
        out[name] = value
    return out


def _moment(body: dict, name: str) -> datetime | None:
    text = field(body, name, str, required=False, max_length=40)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise Problem(400, "invalid_field", f"{name} must be an ISO 8601 date-time with a time zone.", name) from None
    if moment.tzinfo is None:
        raise Problem(400, "invalid_field", f"{name} must carry a time zone (e.g. 2026-01-01T00:00:00Z).", name)
    return moment


@bp.route("/jobs", methods=["POST"])
def enqueue_job():
    key = authenticate()
    body = json_object()
    only_fields(body, {"type", "version", "payload", "idempotency_key", "group_key", "run_at", "expires_at",
                       "priority", "queue", "max_attempts", "correlation_id"})
    new = jobqueue.NewJob(
        type=field(body, "type", str, max_length=100), version=field(body, "version", int, required=False, default=1),
        payload=field(body, "payload", dict), tenant=key["tenant_id"],
        idempotency_key=field(body, "idempotency_key", str, required=False, max_length=200),
        group_key=field(body, "group_key", str, required=False, max_length=200),
        run_at=_moment(body, "run_at"), expires_at=_moment(body, "expires_at"),
        priority=field(body, "priority", int, required=False), queue=field(body, "queue", str, required=False),
        max_attempts=field(body, "max_attempts", int, required=False), correlation_id=correlation_id(body),
        trace_context=tracing.request_context(request.headers))
    try:
        jt = jobtypes.get(new.type, new.version)
        if not jt.public:
            # Internal types read rows only the product makes (a delivery, a report run): a producer's
            # payload for one would be accepted here and fail in the worker.
            raise Problem(422, "job_type_not_public", f"{new.type} is enqueued by opsboard itself, not over the "
                          "API (public types: see the OpenAPI document's JobRequest).", "type")
        # The tenant's pii_mode came with the API key (no extra round trip): refuse or mask.
        payload, redacted = jobtypes.screen_personal_data(jt, new.payload, key.get("pii_mode") or "refuse")
        new = replace(new, payload=payload)
        jobqueue.prepare_row(new)  # every check enqueue makes, before admission and the transaction
    except jobtypes.UnknownJobType as exc:
        raise Problem(422, exc.code, str(exc), "type") from None
    except jobtypes.PersonalDataRefused as exc:
        raise Problem(422, exc.code, str(exc), exc.field) from None
    except jobtypes.JobTypeError as exc:
        raise Problem(422, exc.code, str(exc), _culprit(str(exc))) from None
    except ValueError as exc:  # e.g. a lone surrogate that UTF-8 cannot carry
        raise Problem(422, "invalid_payload", f"payload cannot be stored ({type(exc).__name__})", "payload") from None

    def work(conn):
        row = jobqueue.enqueue(conn, new.type, new.payload, tenant=new.tenant, version=new.version,
                            idempotency_key=new.idempotency_key, group_key=new.group_key, run_at=new.run_at,
                            expires_at=new.expires_at, correlation_id=new.correlation_id, priority=new.priority,
                            queue=new.queue, max_attempts=new.max_attempts, trace_context=new.trace_context)
        out = job_json(row)
        if redacted:
            out["redacted_fields"] = redacted
        return 202, out

    return respond(key, body, new.queue or jt.policy.queue, work)


def _culprit(message: str) -> str:
    for name in ("idempotency_key", "group_key", "queue", "run_at", "expires_at", "priority", "max_attempts"):
        if message.startswith(name) or f" {name} " in message:
            return name
    return "payload"


@bp.route("/jobs/<job_id>", methods=["GET"])
def get_job(job_id: str):
    key = authenticate()
    with get_db().connection() as conn:
        row = jobqueue.get_job(conn, job_id, TenantScope(all=False, ids=(key["tenant_id"],)))
    if row is None:
        raise Problem(404, "not_found", "No such job for this tenant.", "id")
    return job_json(row)
