"""Publishing: an event appended in the caller's transaction, checked against its type first.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import psycopg
from psycopg.types.json import Jsonb

from .. import db, jobqueue, jobtypes
from ..schema import new_id
from ..storable import unstorable
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
        text = jobtypes.encode_payload(payload)
        size = len(text.encode())
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        raise EventRefused("invalid_payload", f"{et.name}: payload is not JSON ({type(exc).__name__})",
                           "payload") from None
    where = jobtypes.unstorable_field(text, payload)
    if where is not None:
        raise EventRefused("invalid_payload", f"{et.name}: {where} holds a character that cannot be stored "
                           "(a NUL or a lone surrogate)", where)
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
    if not 0 < len(ident) <= 200 or unstorable(ident):
        raise EventRefused("invalid_aggregate", "aggregate id must be 1 to 200 characters", "aggregate.id")
    return kind, ident


def publish(conn: psycopg.Connection, type: str, version: int, *, aggregate: tuple[str, Any], tenant,
            payload: dict, correlation_id: str | None = None, now: datetime | None = None,
            fetch: bool = True, trace_context: str | None = None) -> dict:
    """Append an event in the caller's transaction and return the stored envelope.

    Call it on the connection (and inside the transaction) that writes the
    domain change: both commit or neither does.  Raises :class:`EventRefused`
    before writing anything.  With ``fetch=False`` (and ``now`` given) the
    envelope is built from the values sent instead of read back, so that in
    pipeline mode the insert travels with the COMMIT (the HTTP API).
    ``trace_context`` (:func:`opsboard.tracing.request_context`) goes to the event's jobs.
    """
    if not fetch and now is None:
        raise ValueError("publish(fetch=False) needs now")
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now,
                           trace_context=trace_context)
    if fetch:
        return db.one(conn, "outbox_event_insert", params)
    db.execute(conn, "outbox_event_insert", params)
    return {**params, "payload": payload, "occurred_at": now, "relayed_at": None}


def _event_params(type: str, version: int, aggregate, tenant, payload: dict, correlation_id: str | None,
                  now: datetime | None, validated: bool | str = False, trace_context: str | None = None) -> dict:
    """The checked parameters of ``outbox_event_insert``; raises :class:`EventRefused`."""
    et = event_type(type, version)
    kind, ident = _aggregate(aggregate)
    if kind != et.aggregate:
        raise EventRefused("invalid_aggregate", f"{type} events belong to a {et.aggregate!r} aggregate, "
                           f"not {kind!r}", "aggregate.type")
    if not validated:
        validate_payload(et, payload)
    # The text validate_payload returned, when the caller passes it: the payload is not serialized again.
    text = validated if isinstance(validated, str) else None
    if correlation_id is not None and not (0 < len(correlation_id) <= 200):
        raise EventRefused("invalid_field", "correlation_id must be 1 to 200 characters", "correlation_id")
    return {"id": new_id(), "type": et.name, "version": et.version, "aggregate_type": kind, "aggregate_id": ident,
            "tenant_id": jobqueue.tenant_id_of(tenant), "now": now, "correlation_id": correlation_id,
            "trace_context": trace_context,
            "payload": Jsonb(payload, dumps=lambda _: text) if text is not None else Jsonb(payload)}


def publish_admitted(conn: psycopg.Connection, type: str, version: int, *, aggregate: tuple[str, Any], tenant,
                     payload: dict, correlation_id: str | None = None, queue_name: str,
                     high_water: dict[str, int] | None = None, now: datetime | None = None,
                     validated: bool | str = False, leases=None, trace_context: str | None = None):
    """Ask admission (:func:`opsboard.backpressure.admission`) and, if admitted, append the event.

    For a producer with no transaction of its own (the HTTP API), on an autocommit connection: the
    token is taken in a short transaction of its own (:func:`take_admission`), then the event is
    inserted and committed; if the insert fails, the token is given back.  Returns ``(admission,
    envelope)``, the envelope ``None`` when refused (429/503).  Raises :class:`EventRefused` before
    sending anything; ``validated=True`` says the caller has run :func:`validate_payload` on this payload
    already (the HTTP API, before it takes a connection), so it is not checked twice; the text it
    returned, passed as ``validated``, is stored as it is (not serialized again).  ``leases`` (a
    web process's :class:`~opsboard.backpressure.TokenLeases`) admits with a token it holds, without
    the admission's statement, and leases a few when it holds none.
    """
    from .. import backpressure
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now, validated, trace_context)
    adm = backpressure.admission_params(params["tenant_id"], queue_name, high_water=high_water, now=now)
    row = _admit(conn, adm, None, leases)
    verdict = backpressure.Admission(200) if row is None else backpressure.admission_verdict(row, queue_name,
                                                                                            adm["mark"])
    if not verdict.accepted:
        return verdict, None
    with _refund_unless_done(conn, adm["name"], leases):
        event = db.one(conn, "outbox_event_insert", params)
    return verdict, {**event, "payload": payload}


def _admit(conn: psycopg.Connection, adm: dict, key: str | None, leases) -> dict | None:
    """:func:`take_admission`, or None when a token of ``leases`` admitted the request (no statement);
    a take asks for a lease's worth of tokens and gives back the last lease's unspent ones."""
    if leases is None:
        return take_admission(conn, adm, key)
    if leases.spend(adm["name"]):
        return None
    want, back = leases.ask(adm["name"])
    row = take_admission(conn, {**adm, "want": want, "back": back}, key)
    if row["granted"]:
        leases.keep(adm["name"], int(row["granted"]), row["rate"], row["burst"])
    return row


def take_admission(conn: psycopg.Connection, params: dict, key: str | None = None) -> dict:
    """Admission for an event, and with an Idempotency-Key its stored answer (``outbox_event_admit``):
    one statement on an autocommit connection, its own transaction, committed without waiting for its
    WAL flush.

    Why its own transaction: the token's UPDATE locks the tenant's bucket row until its transaction
    ends; in the event's transaction that was through the event's WAL flush, so one tenant's requests
    were serialized on the disk's flush time (issue 27's profile: most of a request's time waited on
    it).  Why not durable: a crash may forget a few tokens taken just before it (the bucket refills
    anyway); the event's own commit is durable, and it flushes this commit's record with it.
    """
    if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("take_admission needs an autocommit connection outside a transaction")
    return db.one(conn, "outbox_event_admit", {**params, "key": key})


@contextlib.contextmanager
def _refund_unless_done(conn: psycopg.Connection, bucket: str, leases=None):
    """Give the token taken from ``bucket`` back if the block raises (the request is answered 5xx or
    its connection broke, and nothing was stored); best effort on a connection that may be gone."""
    try:
        yield
    except BaseException:
        refund_token(conn, bucket, leases)
        raise


def refund_token(conn: psycopg.Connection, bucket: str, leases=None) -> None:
    """One token back: into the process's lease of ``bucket`` while it is valid (``leases``), else to the
    bucket (``rate_limit_refund``); errors are swallowed: a lost refund only makes the tenant wait a
    token's refill time longer."""
    if leases is not None and leases.give_back(bucket):
        return
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        db.execute(conn, "rate_limit_refund", {"name": bucket})
    except Exception:
        pass


def answer_time(at: datetime) -> str:
    """``occurred_at`` as ``outbox_event_insert_once`` writes it into a stored answer (``to_char`` there):
    UTC, with microseconds, so a first answer, its replay and an answer without a key read alike."""
    return at.astimezone(timezone.utc).isoformat(timespec="microseconds")  # ...+00:00, as strftime wrote it


def envelope(event: dict, redacted: list[str] | None = None) -> dict:
    """An event's envelope as the API answers it (``POST /api/v1/events``), and as the export to NATS
    JetStream carries it (:mod:`.export`): id, type, version, aggregate, correlation id and, when the
    event has one yet, ``occurred_at`` (the database adds it to the answer it stores for an
    Idempotency-Key); ``redacted_fields`` when the API masked personal data."""
    out = {"id": str(event["id"]), "type": event["type"], "version": event["version"],
           "aggregate": {"type": event["aggregate_type"], "id": event["aggregate_id"]},
           "correlation_id": event["correlation_id"]}
    if event.get("occurred_at") is not None:
        out["occurred_at"] = answer_time(event["occurred_at"])
    if redacted:
        out["redacted_fields"] = redacted
    return out


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
                 now: datetime | None = None, validated: bool | str = False, leases=None,
                 trace_context: str | None = None) -> Published:
    """:func:`publish_admitted` under an Idempotency-Key (``key``, stored in ``api_idempotency`` with the
    ``request_hash`` of the request), in two round trips on an autocommit connection:

    1. ``outbox_event_admit`` (:func:`take_admission`: its own short, non-durable transaction): the
       answer stored for the key, and only without one, admission and a token;
    2. ``outbox_event_insert_once``: the key's claim with its answer and the event, one durable commit.

    ``answer(params)`` builds the answer to store and give from the event's parameters (``occurred_at``
    is added by the database: the stored answer is the one returned).  A key already stored answers its
    stored answer without taking a token or writing anything (``replayed``), or ``conflict`` for another
    ``request_hash``; a refused request stores nothing.  A request that took a token and then finds the
    key claimed by a concurrent one (which it waited for), or fails, gives its token back.  Raises
    :class:`EventRefused` before sending anything (``validated`` as in :func:`publish_admitted`).

    With ``leases`` (as :func:`publish_admitted`), a request admitted by a token its process holds
    skips step 1: a key already answered then finds its answer at step 2 (nothing is inserted) and
    its token goes back into the lease.
    """
    from .. import backpressure
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now, validated, trace_context)
    adm = backpressure.admission_params(params["tenant_id"], queue_name, high_water=high_water, now=now)
    ids = {"key": key, "request_hash": request_hash, "status": status}
    row = _admit(conn, adm, key, leases)
    if row is None or row["prior_hash"] is None:
        verdict = backpressure.Admission(200) if row is None else backpressure.admission_verdict(
            row, queue_name, adm["mark"])
        if not verdict.accepted:
            return Published(verdict)
        first = answer(params)
        with _refund_unless_done(conn, adm["name"], leases):
            done = db.one(conn, "outbox_event_insert_once", {**params, **ids, "answer": Jsonb(first)})
        if done["claimed"]:
            # What the statement stored: the answer and its occurred_at.
            return Published(verdict, status, {**first, "occurred_at": answer_time(done["occurred_at"])})
        # The key was answered already (a request admitted by its lease did not look), or a concurrent
        # request with the same key committed while this one waited on it: its answer is there now,
        # and this request's token goes back.
        refund_token(conn, adm["name"], leases)
        row = db.one(conn, "api_idempotency_get", {"tenant_id": params["tenant_id"], "key": key})
        row = {"prior_hash": row["request_hash"], "prior_status": row["status"], "prior_response": row["response"]}
    verdict = backpressure.Admission(200)
    if bytes(row["prior_hash"]) != request_hash:
        return Published(verdict, conflict=True, replayed=True)
    return Published(verdict, row["prior_status"], row["prior_response"], replayed=True)
