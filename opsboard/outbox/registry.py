"""The outbox's registry in the catalogue: event types and their payload fields, upcasters between
versions, and subscriptions (event type -> job type).
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from .. import catalogue as _catalogue


#: Largest payload accepted, as JSON bytes: events carry ids and options only.
MAX_PAYLOAD_BYTES = 8 * 1024


class EventRefused(ValueError):
    """:func:`publish` refused an event; ``code`` is stable, ``field`` names the culprit."""

    def __init__(self, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.code, self.field = code, field


@dataclass(frozen=True)
class EventField:
    """One payload field: JSON type(s), required or not, limits, and whether it may hold personal data.

    As in a job type's :class:`~opsboard.jobtypes.Field`, ``uuid.UUID`` among the types means a
    string in the canonical UUID form: the id of a row a consumer will look up.
    """

    types: type | tuple[type, ...]
    required: bool = True
    max_length: int | None = None
    choices: tuple | None = None
    #: Declared personal data (a phone number the SMS needs): exempt from the PII scan.
    pii: bool = False
    min_length: int | None = None


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


def run_at_relay(cat: _catalogue.Catalogue, job_type: str, fn: Callable[[Any, list[dict]], int]) -> None:
    """Let the relay do ``job_type``'s work itself, in the transaction that relays the events, instead of
    inserting a job of that type per event for a worker to claim, run and complete.

    ``fn(conn, jobs)`` gets the prepared job rows the relay would have inserted (``type``, ``payload``,
    ``tenant_id``, ``event_id``, ``correlation_id``, ...; see :func:`opsboard.jobqueue.prepare_row`) and
    returns how many jobs it made.  It runs inside the relay's transaction, so what it writes commits
    exactly when its events are marked relayed: it may only write to the database (no provider call),
    and it must be what the job's handler would do, idempotently -- when ``fn`` raises, the relay rolls
    the batch back and relays it again with the jobs inserted as they were before (their handler does
    the work later).  For a fan-out (``webhook.fanout``: one delivery per endpoint) it removes a whole
    job's life per event: its row and index entries, its claim, its outcome and its attempt row.
    """
    cat.run_at_relay[job_type] = fn
    cat.changed()


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


@functools.lru_cache(maxsize=1024)
def _id_suffix(subscriber: str) -> int:
    return int.from_bytes(hashlib.sha256(subscriber.encode()).digest()[:4], "big")
