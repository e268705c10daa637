"""The transactional outbox: publish events, version them, route them to jobs.

A producer changes its domain rows and calls :func:`publish` on the same
connection, inside the same transaction: the event exists exactly when the
domain change commits.  Writing "database, then provider" (or the reverse)
directly is forbidden; the relay (``worker/services/relay.py``, on every
worker) turns committed events into jobs.

* **Envelope**: UUIDv7 id, ``type`` + ``version``, aggregate type and id,
  tenant, ``occurred_at``, correlation id, and a minimal payload.
* **Registry**: :func:`define_event` declares each ``(type, version)`` with
  the payload fields it allows.  :func:`publish` refuses an unknown type or
  version, an undeclared field, a wrong type, and anything that looks like
  personal data (an email address, a phone number, a person's name in free
  text) unless the field is declared ``pii=True`` -- with an
  :class:`EventRefused` whose ``code`` and ``field`` an API can return.
* **Upcasters**: :func:`define_upcaster` registers ``(type, version) ->
  function`` lifting a payload to ``version + 1``.  Stored events are never
  edited (a trigger refuses it): consumers read them through :func:`upcast`
  at the version they declare.
* **Subscriptions**: :func:`subscribe` routes an event type to a job type
  under a subscriber name.  The job's idempotency key is
  ``<event id>:<subscriber>``; with ``ordered=True`` its ``group_key`` is the
  aggregate (per subscriber), so that subscriber's jobs of one aggregate run
  one at a time, in event order.  There is no global order.

The event types, upcasters and subscriptions live in the
:class:`~opsboard.catalogue.Catalogue`: each feature's ``register(catalogue)``
declares its own (``define_event(cat, ...)``, ``subscribe(cat, ...)``), and the
lookups here read the process's active catalogue.
"""
from __future__ import annotations

import functools
import hashlib
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

import psycopg
from psycopg.types.json import Jsonb

from . import catalogue as _catalogue
from . import db, jobtypes, queue
from .schema import new_id

#: Largest payload accepted, as JSON bytes: events carry ids and options only.
MAX_PAYLOAD_BYTES = 8 * 1024


class EventRefused(ValueError):
    """:func:`publish` refused an event; ``code`` is stable, ``field`` names the culprit."""

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code, self.field = code, field


@dataclass(frozen=True)
class EventField:
    """One payload field: JSON type(s), required or not, limits, and whether it may hold personal data."""

    types: type | tuple[type, ...]
    required: bool = True
    max_length: int | None = None
    choices: tuple | None = None
    #: Declared personal data (a phone number the SMS needs): exempt from the PII scan.
    pii: bool = False


@dataclass(frozen=True)
class EventType:
    name: str
    version: int
    aggregate: str
    fields: dict[str, EventField]
    description: str = ""


@dataclass(frozen=True)
class Subscription:
    """``event_type`` -> ``job_type`` under the name ``subscriber``.

    ``version`` is the event version the consumer reads (older events are
    upcast to it).  ``payload`` builds the job's payload from the envelope
    (default: :func:`default_job_payload`).  ``queue`` and ``expires_in``
    override the job type's queue and give the job a deadline counted from
    the event's ``occurred_at``.
    """

    subscriber: str
    event_type: str
    job_type: str
    version: int = 1
    job_version: int = 1
    ordered: bool = False
    queue: str | None = None
    expires_in: timedelta | None = None
    payload: Callable[[dict], dict] | None = None


def define_event(cat: _catalogue.Catalogue, name: str, version: int = 1, *, aggregate: str,
                 fields: dict[str, EventField], description: str = "") -> EventType:
    """Register an event type version in ``cat`` and the payload fields it allows."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+", name) or len(name) > 100:
        raise ValueError(f"event type {name!r} must look like 'noun.past_verb'")
    if version < 1:
        raise ValueError("event versions start at 1")
    et = EventType(name, int(version), aggregate, dict(fields), description)
    cat.event_types[(name, et.version)] = et
    cat.changed()
    return et


def define_upcaster(cat: _catalogue.Catalogue, name: str, from_version: int, fn: Callable[[dict], dict]) -> None:
    """Register ``fn`` lifting a ``name`` payload from ``from_version`` to ``from_version + 1``."""
    cat.upcasters[(name, int(from_version))] = fn
    cat.changed()


def subscribe(cat: _catalogue.Catalogue, subscriber: str, event_type: str, job_type: str,
              **options: Any) -> Subscription:
    """Route ``event_type`` to ``job_type`` in ``cat`` (see :class:`Subscription`); re-subscribing replaces."""
    sub = Subscription(subscriber, event_type, job_type, **options)
    if not re.fullmatch(r"[a-z][a-z0-9_.-]*", subscriber) or len(subscriber) > 60:
        raise ValueError(f"subscriber {subscriber!r} must be lowercase letters, digits, '.', '_' or '-'")
    subs = [s for s in cat.subscriptions.get(event_type, []) if s.subscriber != subscriber]
    if any(_id_suffix(s.subscriber) == _id_suffix(subscriber) for s in subs):
        raise ValueError(f"subscriber {subscriber!r} collides with another subscriber of {event_type}; rename it")
    cat.subscriptions[event_type] = subs + [sub]
    cat.changed()
    return sub


def event_type(name: str, version: int) -> EventType:
    """The active catalogue's event type, or :class:`EventRefused` (``unknown_event_type``)."""
    types = _catalogue.active().event_types
    try:
        return types[(name, int(version))]
    except (KeyError, TypeError, ValueError):
        known = sorted({f"{n} v{v}" for n, v in types})
        raise EventRefused("unknown_event_type", f"unknown event type {name!r} version {version!r}"
                           + (f" (known: {', '.join(known)})" if known else ""), "type") from None


def event_types() -> list[EventType]:
    """The active catalogue's event types, by name and version."""
    return sorted(_catalogue.active().event_types.values(), key=lambda et: (et.name, et.version))


def subscriptions(event_type_name: str | None = None) -> list[Subscription]:
    """The active catalogue's subscriptions (of one event type, or all)."""
    subs = _catalogue.active().subscriptions
    if event_type_name is not None:
        return list(subs.get(event_type_name, []))
    return [s for group in subs.values() for s in group]


def latest_version(name: str) -> int:
    """The newest version of an event type (``unknown_event_type`` when there is none)."""
    versions = [v for n, v in _catalogue.active().event_types if n == name]
    if not versions:
        event_type(name, 1)  # raises unknown_event_type
    return max(versions)


# ------------------------------------------------------------ personal data

_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
# 8 to 15 digits, optionally with +, spaces, dots, dashes or parentheses, not glued to an id.
_PHONE_RE = re.compile(r"(?<![\w-])\+?\(?\d[\d ().-]{6,}\d(?![\w-])")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Two or more capitalised words in a row: "Maria Rossi", "Dear John Smith".
_NAME_RE = re.compile(r"\b[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?\s+[A-Z][a-z]+\b")


def personal_data_kind(text: str) -> str | None:
    """``"email"``, ``"phone"`` or ``"name"`` when ``text`` looks like personal data, else ``None``.

    A heuristic, meant to stop accidents (a whole user record pasted into an
    event), not a classifier: ids, codes and single words pass.
    """
    if _EMAIL_RE.search(text):
        return "email"
    for m in _PHONE_RE.finditer(_UUID_RE.sub("", text)):
        digits = sum(c.isdigit() for c in m.group(0))
        if 8 <= digits <= 15:
            return "phone"
    if _NAME_RE.search(text):
        return "name"
    return None


def _scan(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        kind = personal_data_kind(value)
        return (path, kind) if kind else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _scan(str(k), path) or _scan(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _scan(v, f"{path}[{i}]")
            if found:
                return found
    return None


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
        types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
        wrong = (isinstance(value, bool) and bool not in types) or not (
            isinstance(value, types) or (float in types and isinstance(value, int) and not isinstance(value, bool)))
        if wrong:
            raise EventRefused("invalid_field", f"{et.name}: field {name!r} must be {jobtypes._names(types)}", where)
        if spec.max_length is not None and hasattr(value, "__len__") and len(value) > spec.max_length:
            raise EventRefused("invalid_field", f"{et.name}: field {name!r} is longer than {spec.max_length}", where)
        if spec.choices is not None and value not in spec.choices:
            raise EventRefused("invalid_field", f"{et.name}: field {name!r} must be one of "
                               f"{', '.join(map(str, spec.choices))}", where)
        if not spec.pii:
            found = _scan(value, where)
            if found:
                raise EventRefused("personal_data", f"{et.name}: {found[0]} looks like personal data "
                                   f"({found[1]}); events carry ids -- store the data in your own table, "
                                   "or declare the field pii=True", found[0])
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


# ------------------------------------------------------------ publish

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
            "tenant_id": queue._tenant_id(tenant), "now": now, "correlation_id": correlation_id,
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
    from . import backpressure
    params = _event_params(type, version, aggregate, tenant, payload, correlation_id, now)
    adm = backpressure.admission_params(params["tenant_id"], queue_name, high_water=high_water, now=now)
    row = db.one(conn, "outbox_event_publish_admitted", {**params, **adm})
    verdict = backpressure.admission_verdict(row, queue_name, adm["mark"])
    if not verdict.accepted:
        return verdict, None
    return verdict, {**params, "payload": payload, "occurred_at": row["occurred_at"], "relayed_at": None}


def upcast(type: str, version: int, payload: dict, to_version: int) -> dict:
    """``payload`` of a stored ``(type, version)`` event, lifted to ``to_version``."""
    upcasters = _catalogue.active().upcasters
    while version < to_version:
        fn = upcasters.get((type, version))
        if fn is None:
            raise LookupError(f"no upcaster for {type} v{version} -> v{version + 1}")
        payload = fn(dict(payload))
        version += 1
    if version > to_version:
        raise LookupError(f"{type} v{version} is newer than the consumer's v{to_version}")
    return payload


# ------------------------------------------------------------ relay

def default_job_payload(event: dict) -> dict:
    """The job payload a subscriber gets by default: the envelope's ids plus the (upcast) data."""
    return {"event_id": str(event["id"]), "event_type": event["type"], "event_version": event["version"],
            "aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}", "data": event["payload"]}


@functools.lru_cache(maxsize=1024)
def _id_suffix(subscriber: str) -> int:
    return int.from_bytes(hashlib.sha256(subscriber.encode()).digest()[:4], "big")


def job_id_for(event_id: uuid.UUID, subscriber: str) -> uuid.UUID:
    """The id of the job an event makes for a subscriber.

    The event id's first 96 bits (its UUIDv7 time and monotonic counter) with
    32 bits from the subscriber's name: job ids sort like the events they come
    from, which is the order a group's jobs run in, whichever relay process or
    host inserted them.
    """
    return uuid.UUID(int=(event_id.int >> 32 << 32) | _id_suffix(subscriber))


def jobs_for(event: dict) -> list[dict]:
    """The prepared job rows that an event makes, one per subscription."""
    rows = []
    for sub in _catalogue.active().subscriptions.get(event["type"], []):
        view = dict(event)
        if sub.version != event["version"]:
            view["payload"] = upcast(event["type"], event["version"], event["payload"], sub.version)
            view["version"] = sub.version
        payload = (sub.payload or default_job_payload)(view)
        row = queue._prepare(queue.NewJob(
            sub.job_type, payload, event["tenant_id"], sub.job_version,
            idempotency_key=f"{event['id']}:{sub.subscriber}",
            group_key=f"{event['aggregate_type']}:{event['aggregate_id']}:{sub.subscriber}" if sub.ordered else None,
            expires_at=event["occurred_at"] + sub.expires_in if sub.expires_in else None,
            correlation_id=event["correlation_id"], event_id=event["id"], queue=sub.queue))
        row["id"] = job_id_for(event["id"], sub.subscriber)
        rows.append(row)
    return rows


#: An event that cannot be routed this long after it occurred is parked (see :func:`relay_events`).
PARK_AFTER = timedelta(minutes=5)


@dataclass
class RelayResult:
    events: int = 0
    jobs: int = 0
    failed: list = field(default_factory=list)
    parked: list = field(default_factory=list)


def relay_events(conn: psycopg.Connection, limit: int = 500, now: datetime | None = None, *,
                 park_after: timedelta = PARK_AFTER) -> RelayResult:
    """Relay one batch: lock unrelayed events (SKIP LOCKED), insert their jobs, mark them relayed.

    All in one transaction: a relay killed anywhere leaves either nothing or
    the whole batch done, so every committed event yields its jobs exactly
    once.  Events whose every subscription the database can route
    (:func:`sql_routes`: default job payload, no upcast) are claimed, turned
    into jobs and marked relayed by ONE statement, with no per-event Python
    work -- on an idle autocommit connection that statement is the whole
    transaction, one round trip; the other events are then routed by
    :func:`jobs_for` in a transaction of their own.  An event that cannot be routed (an unknown job type, an upcaster
    missing, a job payload its job type refuses, a job row the database
    refuses) is reported in ``failed`` and stays unrelayed, so that a deploy
    that is still rolling out can route it on a later pass; the others go on.
    Once it is ``park_after`` old it is *parked*: marked relayed without jobs,
    with its routing error in the audit log (action ``outbox.park``, target the
    event, reason the error), reported in ``parked``.  So a poison event
    neither blocks its aggregate nor fills the relay's batches forever, and
    the operator finds it (metrics ``opsboard_outbox_parked_24h``, the queue
    health page, the audit log).
    """
    done, set_based = {"events": 0, "jobs": 0}, True
    if conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # The common case in one round trip: the statement is its own transaction.
        try:
            left, done = _relay_plain(conn, limit, now, set_based=True)
        except _SetBasedRefused:
            set_based = False
        else:
            if not left:
                return RelayResult(events=done["events"], jobs=done["jobs"])
    try:
        result = _relay_batch(conn, limit, now, park_after, set_based=set_based)
    except _SetBasedRefused:  # rolled back: the same batch again, every event through jobs_for
        result = _relay_batch(conn, limit, now, park_after, set_based=False)
    result.events += done["events"]
    result.jobs += done["jobs"]
    return result


class _SetBasedRefused(Exception):
    pass


def _relay_batch(conn: psycopg.Connection, limit: int, now: datetime | None, park_after: timedelta, *,
                 set_based: bool) -> RelayResult:
    result = RelayResult()
    with conn.transaction():
        events, plain = _relay_plain(conn, limit, now, set_based)
        routed: list[tuple[dict, list[dict]]] = []
        failed: list[tuple[dict, str]] = []
        for event in events:
            try:
                routed.append((event, jobs_for(event)))
            except (jobtypes.JobTypeError, LookupError, ValueError, TypeError) as exc:
                failed.append((event, f"{type(exc).__name__}: {exc}"))
        rows = [r for _, rs in routed for r in rs]
        if rows:
            try:
                with conn.transaction():  # a savepoint: one refused row must not sink the batch
                    _insert_jobs(conn, rows)
            except (psycopg.errors.DataError, psycopg.errors.IntegrityError):
                ok = []
                for event, rs in routed:
                    try:
                        with conn.transaction():
                            _insert_jobs(conn, rs)
                        ok.append((event, rs))
                    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
                        failed.append((event, f"{type(exc).__name__}: {exc}".strip()))
                routed = ok
        if failed:
            at = db.now(conn, now)
            for event, reason in failed:
                if at - event["occurred_at"] >= park_after:
                    _park(conn, event, reason)
                    result.parked.append((event["id"], reason))
                else:
                    result.failed.append((event["id"], reason))
        done = [e["id"] for e, _ in routed] + [eid for eid, _ in result.parked]
        if done:
            db.execute(conn, "outbox_mark_relayed", {"ids": done, "now": now})
        result.events = plain["events"] + len(routed)
        result.jobs = plain["jobs"] + sum(len(rs) for _, rs in routed)
    return result


def _relay_plain(conn: psycopg.Connection, limit: int, now: datetime | None,
                 set_based: bool) -> tuple[list[dict], dict]:
    """The set-based part of a batch (``outbox_relay_plain``): returns the batch's events left for
    :func:`jobs_for` (locked, in id order) and the counts of events and jobs relayed in SQL.

    Should the statement fail (a job row the database refuses), :class:`_SetBasedRefused` rolls
    the transaction back (no savepoint round trips on the common path) and :func:`relay_events`
    routes the batch through Python, which isolates the culprit; so does ``set_based=False``.
    """
    plain, routes, ordered = sql_routes() if set_based else ([], "[]", [])
    try:
        rows = db.all_rows(conn, "outbox_relay_plain", {"limit": limit, "now": now, "routes": routes,
                                                        "plain": plain, "ordered": ordered})
    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
        if not set_based:
            raise
        raise _SetBasedRefused() from exc
    counts = {"events": rows[0]["events"], "jobs": rows[0]["jobs"]}
    return [{k: v for k, v in r.items() if k not in counts} for r in rows if r["id"] is not None], counts


#: The default job payload's fields, their JSON type and longest value (see :func:`default_job_payload`).
_ENVELOPE_FIELDS = {"event_id": (str, 36), "event_type": (str, 100), "event_version": (int, None),
                    "aggregate": (str, 251), "data": (dict, None)}


def _plain_job_type(sub: Subscription) -> jobtypes.JobType | None:
    """The job type of ``sub`` when the database may build its jobs (default payload, the job type
    surely accepts it, a valid queue), else ``None``."""
    if sub.payload is not None or (sub.queue is not None and sub.queue not in queue.QUEUE_NAMES):
        return None
    try:
        jt = jobtypes.get(sub.job_type, sub.job_version)
    except jobtypes.JobTypeError:
        return None
    if jt.check is not None or jobtypes.MAX_PAYLOAD_BYTES < MAX_PAYLOAD_BYTES + 2048:
        return None
    if jt.fields:
        if not set(_ENVELOPE_FIELDS) <= set(jt.fields):
            return None
        for name, spec in jt.fields.items():
            if name not in _ENVELOPE_FIELDS:
                if spec.required:
                    return None
                continue
            kind, longest = _ENVELOPE_FIELDS[name]
            types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
            if kind not in types or spec.choices is not None or (
                    spec.max_length is not None and (longest is None or spec.max_length < longest)):
                return None
    return jt


def sql_routes() -> tuple[list[str], str, list[str]]:
    """The routing table of ``outbox_relay_plain``: the ``type/version`` keys whose every subscription
    the database can route, their routes (JSON), and the keys with an ordered subscriber.

    A subscription is routed in SQL when it reads the event's own version (no upcast) with the
    default job payload into a job type that surely accepts that payload; an event of any other
    key goes through :func:`jobs_for`, which also reports its errors.  Cached per catalogue revision.
    """
    cat = _catalogue.active()
    return cat.derived("sql_routes", lambda: _sql_routes(cat))


def _sql_routes(cat: _catalogue.Catalogue) -> tuple[list[str], str, list[str]]:
    plain, routes, ordered = [], [], []
    for (name, version) in cat.event_types:
        key, rows = f"{name}/{version}", []
        for sub in cat.subscriptions.get(name, []):
            jt = _plain_job_type(sub) if sub.version == version else None
            if jt is None:
                break
            policy = jt.policy
            rows.append({"route": key, "subscriber": sub.subscriber, "suffix": _id_suffix(sub.subscriber),
                         "job_type": jt.name, "job_version": jt.version, "queue": sub.queue or policy.queue,
                         "priority": policy.priority, "max_attempts": policy.max_attempts,
                         "ordered": sub.ordered,
                         "expires_in": f"{sub.expires_in.total_seconds()} seconds" if sub.expires_in else None})
        else:
            plain.append(key)
            routes.extend(rows)
            if any(r["ordered"] for r in rows):
                ordered.append(key)
    return plain, jobtypes._ENCODER.encode(routes), ordered


def _insert_jobs(conn: psycopg.Connection, rows: list[dict]) -> None:
    if rows:
        doc = "[" + ",".join(queue._row_json(r) for r in rows) + "]"
        db.execute(conn, "job_insert_many", {"rows": doc})


def _park(conn: psycopg.Connection, event: dict, reason: str) -> None:
    from . import audit
    audit.record(conn, audit.Actor("relay"), "outbox.park", target_type="outbox_event", target_id=event["id"],
                 tenant_id=event["tenant_id"], reason=reason[:1000],
                 after={"type": event["type"], "version": event["version"],
                        "aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}"})

