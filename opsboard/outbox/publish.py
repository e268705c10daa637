"""Publishing: an event appended in the caller's transaction, checked against its type first.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import psycopg
from psycopg.types.json import Jsonb

from .. import db, jobqueue, jobtypes
from ..schema import new_id
from .registry import event_type, EventRefused, EventType, MAX_PAYLOAD_BYTES
from .personal_data import refuse_personal_data


def validate_payload(et: EventType, payload: Any) -> str:
    """Check a payload against its type; return its compact JSON or raise :class:`EventRefused`."""
    if not isinstance(payload, dict):
        raise EventRefused("invalid_payload", f"{et.name}: payload must be a JSON object", "payload")
    unknown = sorted(set(payload) - set(et.fields))
    if unknown:
        raise EventRefused("unknown_field", f"{et.name} v{et.version} does not allow field(s) "
                           f"{', '.join(map(str, unknown))} (allowed: {', '.join(sorted(et.fields)) or 'none'})",
                           f"payload.{unknown[0]}")
    for name, spec in et.fields.items():
        where = f"payload.{name}"
        if payload.get(name) is None:
            if spec.required:
                raise EventRefused("missing_field", f"{et.name}: field {name!r} is required", where)
            continue
        value = payload[name]
        problem = jobtypes.field_problem(spec, name, value)
        if problem:
            raise EventRefused("invalid_field", f"{et.name}: {problem}", where)
    refuse_personal_data(et, payload)
    try:
        text = jobtypes._ENCODER.encode(payload)
        size = len(text.encode())
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise EventRefused("invalid_payload", f"{et.name}: payload is not JSON ({type(exc).__name__})",
                           "payload") from None
    if "\\u0000" in text:
        raise EventRefused("invalid_payload", f"{et.name}: payload contains a NUL character", "payload")
    if size > MAX_PAYLOAD_BYTES:
        raise EventRefused("invalid_payload", f"{et.name}: payload is larger than {MAX_PAYLOAD_BYTES} bytes",
                           "payload")
    return text


def _aggregate(aggregate) -> tuple[str, str]:
    try:
        kind, ident = aggregate
    except (TypeError, ValueError):
        raise EventRefused("invalid_aggregate", "aggregate must be (kind, id)", "aggregate") from None
    kind, ident = str(kind), str(ident)
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,49}", kind):
        raise EventRefused("invalid_aggregate", "aggregate kind must be lowercase letters, digits or '_'",
                           "aggregate.type")
    if not 0 < len(ident) <= 200 or "\x00" in ident:
        raise EventRefused("invalid_aggregate", "aggregate id must be 1 to 200 characters", "aggregate.id")
    return kind, ident


def publish(conn: psycopg.Connection, type: str, version: int, *, aggregate: tuple[str, Any], tenant,
            payload: dict, correlation_id: str | None = None, now: datetime | None = None,
            fetch: bool = True) -> dict:
    """Append an event in the caller's transaction and return the stored envelope.

    Call it on the connection (and inside the transaction) that writes the
    domain change: both commit or neither does.  Raises :class:`EventRefused`
    before writing anything.  With ``fetch=False`` (and ``now`` given) the
    envelope is built from the values sent instead of read back, so that in
    pipeline mode the insert travels with the COMMIT (the HTTP API).
    """
    if not fetch and now is None:
        raise ValueError("publish(fetch=False) needs now")
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now)
    if fetch:
        return db.one(conn, "outbox_event_insert", params)
    db.execute(conn, "outbox_event_insert", params)
    return {**params, "payload": payload, "occurred_at": now, "relayed_at": None}


def _event_params(type: str, version: int, aggregate, tenant, payload: dict, correlation_id: str | None,
                  now: datetime | None) -> dict:
    """The checked parameters of ``outbox_event_insert``; raises :class:`EventRefused`."""
    et = event_type(type, version)
    kind, ident = _aggregate(aggregate)
    if kind != et.aggregate:
        raise EventRefused("invalid_aggregate", f"{type} events belong to a {et.aggregate!r} aggregate, "
                           f"not {kind!r}", "aggregate.type")
    validate_payload(et, payload)
    if correlation_id is not None and not (0 < len(correlation_id) <= 200):
        raise EventRefused("invalid_field", "correlation_id must be 1 to 200 characters", "correlation_id")
    return {"id": new_id(), "type": et.name, "version": et.version, "aggregate_type": kind, "aggregate_id": ident,
            "tenant_id": jobqueue.tenant_id_of(tenant), "now": now, "correlation_id": correlation_id,
            "payload": Jsonb(payload)}


def publish_admitted(conn: psycopg.Connection, type: str, version: int, *, aggregate: tuple[str, Any], tenant,
                     payload: dict, correlation_id: str | None = None, queue_name: str,
                     high_water: dict[str, int] | None = None, now: datetime | None = None):
    """Ask admission (:func:`opsboard.backpressure.admission`) and, if admitted, append the event: one statement.

    For a producer with no transaction of its own (the HTTP API): on an
    autocommit connection this is one round trip and one commit.  Returns
    ``(admission, envelope)``, the envelope ``None`` when refused (429/503).
    Raises :class:`EventRefused` before sending anything.
    """
    from .. import backpressure
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now)
    adm = backpressure.admission_params(params["tenant_id"], queue_name, high_water=high_water, now=now)
    row = db.one(conn, "outbox_event_publish_admitted", {**params, **adm})
    verdict = backpressure.admission_verdict(row, queue_name, adm["mark"])
    if not verdict.accepted:
        return verdict, None
    return verdict, {**params, "payload": payload, "occurred_at": row["occurred_at"], "relayed_at": None}


@dataclass(frozen=True)
class Published:
    """What :func:`publish_once` did: ``verdict`` (admission), and ``status``/``response`` -- the answer
    stored for the key (the first request's, when ``replayed``); ``response`` is ``None`` when refused
    (429/503) or when ``conflict`` (the key was stored with another ``request_hash``)."""

    verdict: Any
    status: int | None = None
    response: dict | None = None
    replayed: bool = False
    conflict: bool = False


def publish_once(conn: psycopg.Connection, type: str, version: int, *, aggregate: tuple[str, Any], tenant,
                 payload: dict, correlation_id: str | None = None, queue_name: str, key: str, request_hash: bytes,
                 answer: Callable[[dict], dict], status: int = 202, high_water: dict[str, int] | None = None,
                 now: datetime | None = None) -> Published:
    """:func:`publish_admitted` under an Idempotency-Key (``key``, stored in ``api_idempotency`` with the
    ``request_hash`` of the request), in one statement (``outbox_event_publish_once``).

    ``answer(params)`` builds the answer to store and give from the event's parameters (``occurred_at``
    is added by the database: the stored answer is the one returned).  A key already stored answers its
    stored answer without taking a token or writing anything (``replayed``), or ``conflict`` for another
    ``request_hash``; a refused request stores nothing.  Raises :class:`EventRefused` before sending
    anything.  Call it on an autocommit connection: the bucket's row is locked until the commit.
    """
    from .. import backpressure
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now)
    adm = backpressure.admission_params(params["tenant_id"], queue_name, high_water=high_water, now=now)
    ids = {"key": key, "request_hash": request_hash, "status": status, "answer": Jsonb(answer(params))}
    row = db.one(conn, "outbox_event_publish_once", {**params, **adm, **ids})
    if row["prior_hash"] is None and row["granted"] and row["response"] is None:
        # A concurrent request with the same key committed while this one waited on it (the
        # statement's snapshot is older than that commit): its answer is there now.
        stored = db.one(conn, "api_idempotency_get", {"tenant_id": params["tenant_id"], "key": key})
        if stored is not None:
            row = {**row, "prior_hash": stored["request_hash"], "prior_status": stored["status"],
                   "prior_response": stored["response"]}
    if row["prior_hash"] is not None:
        verdict = backpressure.Admission(200)
        if bytes(row["prior_hash"]) != request_hash:
            return Published(verdict, conflict=True, replayed=True)
        return Published(verdict, row["prior_status"], row["prior_response"], replayed=True)
    verdict = backpressure.admission_verdict(row, queue_name, adm["mark"])
    if not verdict.accepted:
        return Published(verdict)
    return Published(verdict, status, row["response"])
