"""The relay's batch: committed events turned into their subscribers' jobs, exactly once.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from .. import catalogue as _catalogue
from .. import db, jobqueue, jobtypes
from ..config import QUEUE_NAMES
from .registry import _id_suffix, MAX_PAYLOAD_BYTES, Subscription, upcast

log = logging.getLogger("opsboard.outbox.relay")


def default_job_payload(event: dict) -> dict:
    """The job payload a subscriber gets by default: the envelope's ids plus the (upcast) data."""
    return {"event_id": str(event["id"]), "event_type": event["type"], "event_version": event["version"],
            "aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}", "data": event["payload"]}


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
        row = jobqueue.prepare_row(jobqueue.NewJob(
            sub.job_type, payload, event["tenant_id"], sub.job_version,
            idempotency_key=f"{event['id']}:{sub.subscriber}",
            group_key=f"{event['aggregate_type']}:{event['aggregate_id']}:{sub.subscriber}" if sub.ordered else None,
            expires_at=event["occurred_at"] + sub.expires_in if sub.expires_in else None,
            correlation_id=event["correlation_id"], event_id=event["id"], queue=sub.queue,
            trace_context=event.get("trace_context")))
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
    #: Events of the batch routed in Python (:func:`jobs_for`), not by the one statement.
    in_python: int = 0


def relay_events(conn: psycopg.Connection, limit: int = 500, now: datetime | None = None, *,
                 park_after: timedelta = PARK_AFTER, expect_python: bool = False) -> RelayResult:
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

    ``expect_python`` (the previous batch routed events in Python: ``in_python``) skips the one-statement
    attempt, which would lock such a batch only to unlock it again, and starts with the transaction.
    """
    done, set_based = {"events": 0, "jobs": 0}, True
    if (conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            and not expect_python):
        # The common case in one round trip: the statement is its own transaction.
        try:
            left, done = _relay_plain(conn, limit, now, set_based=True)
        except _SetBasedRefused:
            set_based = False
        else:
            if not left:
                return RelayResult(events=done["events"], jobs=done["jobs"])
    at_relay = True
    while True:
        try:
            result = _relay_batch(conn, limit, now, park_after, set_based=set_based, at_relay=at_relay)
            break
        except _SetBasedRefused:  # rolled back: the same batch again, every event through jobs_for
            set_based = False
        except _AtRelayRefused as exc:  # rolled back: the same batch again, those jobs inserted as jobs
            log.warning("the work of %s done at the relay failed (%s: %s); inserting its jobs instead",
                        exc, type(exc.__cause__).__name__, exc.__cause__)
            at_relay = False
    result.events += done["events"]
    result.jobs += done["jobs"]
    return result


class _SetBasedRefused(Exception):
    pass


class _AtRelayRefused(Exception):
    pass


def _relay_batch(conn: psycopg.Connection, limit: int, now: datetime | None, park_after: timedelta, *,
                 set_based: bool, at_relay: bool = True) -> RelayResult:
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
        made = 0
        if at_relay and routed:
            routed, made = _run_at_relay(conn, routed)
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
        result.in_python = len(routed) + len(failed)
        result.events = plain["events"] + len(routed)
        result.jobs = plain["jobs"] + sum(len(rs) for _, rs in routed) + made
    return result


def _run_at_relay(conn: psycopg.Connection, routed: list[tuple[dict, list[dict]]]):
    """The jobs of ``routed`` whose type the relay does itself (:func:`~.registry.run_at_relay`), done
    now, in this transaction: returns ``routed`` without them (the events stay, to be marked relayed)
    and how many jobs their work made.  A failure rolls the whole batch back (:class:`_AtRelayRefused`:
    no savepoint round trips on the common path) and :func:`relay_events` relays it again with those
    jobs inserted as jobs."""
    at_relay = _catalogue.active().run_at_relay
    if not at_relay:
        return routed, 0
    by_type: dict[str, list[dict]] = {}
    kept = []
    for event, rows in routed:
        left = []
        for row in rows:
            if row["type"] in at_relay:
                by_type.setdefault(row["type"], []).append(row)
            else:
                left.append(row)
        kept.append((event, left))
    made = 0
    for job_type, rows in by_type.items():
        try:
            made += at_relay[job_type](conn, rows)
        except Exception as exc:
            raise _AtRelayRefused(job_type) from exc
    return kept, made


def _relay_plain(conn: psycopg.Connection, limit: int, now: datetime | None,
                 set_based: bool) -> tuple[list[dict], dict]:
    """The set-based part of a batch (``outbox_relay_plain``): returns the batch's events left for
    :func:`jobs_for` (locked, in id order) and the counts of events and jobs relayed in SQL.

    Should the statement fail (a job row the database refuses), :class:`_SetBasedRefused` rolls
    the transaction back (no savepoint round trips on the common path) and :func:`relay_events`
    routes the batch through Python, which isolates the culprit; so does ``set_based=False``.
    """
    plain, routes, ordered = sql_routes() if set_based else ([], "[]", [])
    params = {"limit": limit, "now": now, "routes": routes, "plain": plain, "ordered": ordered}
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            # The batch's plan is pinned in the statement's transaction (outbox_relay_walk_in_order):
            # on an idle connection, a transaction of its own holds just the two.
            rows = _relay_plain_pinned(conn, params)
        else:
            db.execute(conn, "outbox_relay_walk_in_order")
            rows = db.all_rows(conn, "outbox_relay_plain", params)
            db.execute(conn, "outbox_relay_walk_restore")  # the transaction goes on
    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
        if not set_based:
            raise
        raise _SetBasedRefused() from exc
    counts = {"events": rows[0]["events"], "jobs": rows[0]["jobs"]}
    return [{k: v for k, v in r.items() if k not in counts} for r in rows if r["id"] is not None], counts


def _relay_plain_pinned(conn: psycopg.Connection, params: dict) -> list[dict]:
    """``outbox_relay_plain`` after ``outbox_relay_walk_in_order`` in a transaction of their own, on an
    idle connection: BEGIN, both statements and COMMIT in one round trip (pipeline mode, as the
    claim's locked walk does: psycopg's transaction() syncs on entering and on leaving)."""
    if not psycopg.Pipeline.is_supported():
        with conn.transaction():
            db.execute(conn, "outbox_relay_walk_in_order")
            return db.all_rows(conn, "outbox_relay_plain", params)
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            db.execute(conn, "outbox_relay_walk_in_order")
            cur = db.execute(conn, "outbox_relay_plain", params)
            conn.execute("COMMIT")
    except BaseException:
        # A failed statement leaves the explicit transaction aborted (the COMMIT behind it was
        # skipped): end it, so that relay_events can route the batch in a transaction of its own.
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise
    return cur.fetchall()


#: The default job payload's fields, their JSON type and longest value (see :func:`default_job_payload`).
_ENVELOPE_FIELDS = {"event_id": (str, 36), "event_type": (str, 100), "event_version": (int, None),
                    "aggregate": (str, 251), "data": (dict, None)}


def _plain_job_type(sub: Subscription) -> jobtypes.JobType | None:
    """The job type of ``sub`` when the database may build its jobs (default payload, the job type
    surely accepts it, a valid queue), else ``None``."""
    if sub.payload is not None or (sub.queue is not None and sub.queue not in QUEUE_NAMES):
        return None
    if sub.job_type in _catalogue.active().run_at_relay:
        return None  # done by the relay in Python (_run_at_relay), not inserted as a job
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
        doc = "[" + ",".join(jobqueue.row_json(r) for r in rows) + "]"
        db.execute(conn, "job_insert_many", {"rows": doc})


def _park(conn: psycopg.Connection, event: dict, reason: str) -> None:
    from .. import audit
    audit.record(conn, audit.Actor("relay"), "outbox.park", target_type="outbox_event", target_id=event["id"],
                 tenant_id=event["tenant_id"], reason=reason[:1000],
                 after={"type": event["type"], "version": event["version"],
                        "aggregate": f"{event['aggregate_type']}:{event['aggregate_id']}"})
