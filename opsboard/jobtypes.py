"""The job type registry: ``(type, version) -> policy + payload contract``.

A producer cannot enqueue an unknown type/version or a payload that breaks its
contract: :func:`validate` raises before anything is written, so a job never
discovers a predictable user error late.  The handler is named by a dotted path
(``"worker.handlers.diag:noop"``) and resolved only by the worker, so the core
never imports the worker.

Applications define their own types in a module listed in
``OPSBOARD_JOB_MODULES``; it is imported by the web app and the worker at start.
"""
from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .config import QUEUE_NAMES

#: Largest payload accepted, as JSON bytes: payloads carry ids and options only.
MAX_PAYLOAD_BYTES = 16 * 1024


class JobTypeError(ValueError):
    """Base for enqueue-time errors; ``code`` is a stable identifier for APIs."""

    code = "invalid_job"


class UnknownJobType(JobTypeError):
    code = "unknown_job_type"


class InvalidPayload(JobTypeError):
    code = "invalid_payload"


@dataclass(frozen=True)
class Field:
    """One payload field: its JSON type(s), whether required, and simple limits."""

    types: type | tuple[type, ...]
    required: bool = True
    max_length: int | None = None
    choices: tuple | None = None


@dataclass(frozen=True)
class JobPolicy:
    queue: str = "default"
    priority: int = 100
    max_attempts: int = 5
    #: Seconds a handler may run before it is treated as hung (outcome Unknown("timeout")).
    timeout: float = 30.0
    backoff_base: float = 2.0
    backoff_cap: float = 600.0
    #: Long-running handlers heartbeat to extend their lease; others do not.
    long_running: bool = False
    #: Most jobs of this type running at once across all workers (None: no limit).
    concurrency: int | None = None
    #: The provider this type talks to (for per-provider limits).
    provider: str | None = None

    def __post_init__(self):
        if self.queue not in QUEUE_NAMES:
            raise ValueError(f"queue {self.queue!r} is not one of {QUEUE_NAMES}")
        if self.max_attempts < 1 or self.timeout <= 0 or self.backoff_base < 0 or self.backoff_cap < 0:
            raise ValueError("max_attempts >= 1, timeout > 0, backoff base and cap >= 0")
        if not -32768 <= self.priority <= 32767:
            raise ValueError("priority must fit a smallint")


@dataclass(frozen=True)
class JobType:
    name: str
    version: int
    handler: str
    policy: JobPolicy
    fields: dict[str, Field] = field(default_factory=dict)
    #: Extra check after the fields: raise InvalidPayload or return nothing.
    check: Callable[[dict], None] | None = None
    description: str = ""


_registry: dict[tuple[str, int], JobType] = {}


@dataclass(frozen=True)
class Provider:
    """An external service shared by several job types, with limits across all workers."""

    name: str
    #: Most jobs talking to it at once (None: no limit).
    concurrency: int | None = None
    #: Token bucket: sustained calls per second and burst size (None: no rate limit).
    rate_per_second: float | None = None
    burst: int | None = None


_providers: dict[str, Provider] = {}


def define_provider(name: str, *, concurrency: int | None = None, rate_per_second: float | None = None,
                    burst: int | None = None) -> Provider:
    """Register a provider's limits; redefining replaces them."""
    if concurrency is not None and concurrency < 1:
        raise ValueError("provider concurrency must be at least 1")
    if rate_per_second is not None and rate_per_second <= 0:
        raise ValueError("provider rate must be positive")
    p = Provider(name, concurrency, rate_per_second, burst or (max(1, int(rate_per_second)) if rate_per_second else None))
    _providers[name] = p
    return p


def provider(name: str | None) -> Provider | None:
    return _providers.get(name) if name else None


@dataclass(frozen=True)
class ConcurrencyLimits:
    """The limits a queue's claim must respect, as arrays for SQL."""

    lock_names: tuple[str, ...]
    types: tuple[str, ...]
    type_limits: tuple[int, ...]
    type_groups: tuple[str, ...]
    groups: tuple[str, ...]
    group_limits: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return not self.lock_names


def concurrency_limits(queue: str) -> ConcurrencyLimits:
    """Per-type and per-provider limits relevant to ``queue``'s claim.

    Every type of a limited provider is listed (their running jobs count
    against the provider); ``type_groups`` names each type's provider ("" when
    none).  ``lock_names`` are the advisory locks a claim takes (sorted, so
    claims never deadlock) to make check-and-claim atomic across workers.
    """
    types: dict[str, tuple[int, str]] = {}
    groups: dict[str, int] = {}
    locks: set[str] = set()
    for jt in _registry.values():
        prov = provider(jt.policy.provider)
        limited_type = jt.policy.concurrency is not None
        limited_prov = prov is not None and prov.concurrency is not None
        if not (limited_type or limited_prov):
            continue
        limit = jt.policy.concurrency if limited_type else 1_000_000
        previous = types.get(jt.name)
        types[jt.name] = (min(limit, previous[0]) if previous else limit, prov.name if limited_prov else "")
        if limited_prov:
            groups[prov.name] = prov.concurrency
        if jt.policy.queue == queue:
            if limited_type:
                locks.add("type:" + jt.name)
            if limited_prov:
                locks.add("provider:" + prov.name)
    if not locks:
        return ConcurrencyLimits((), (), (), (), (), ())
    names = sorted(types)
    return ConcurrencyLimits(tuple(sorted(locks)), tuple(names), tuple(types[n][0] for n in names),
                             tuple(types[n][1] for n in names), tuple(sorted(groups)),
                             tuple(groups[g] for g in sorted(groups)))


def define(name: str, version: int = 1, *, handler: str, fields: dict[str, Field] | None = None,
           check: Callable[[dict], None] | None = None, description: str = "", **policy: Any) -> JobType:
    """Register a job type; redefining the same (name, version) replaces it."""
    if not name or len(name) > 100 or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"job type name {name!r} must be letters, digits, '.', '_' or '-'")
    jt = JobType(name, int(version), handler, JobPolicy(**policy), dict(fields or {}), check, description)
    _registry[(jt.name, jt.version)] = jt
    return jt


def get(name: str, version: int = 1) -> JobType:
    """The registered type, or :class:`UnknownJobType`."""
    try:
        return _registry[(name, int(version))]
    except (KeyError, ValueError, TypeError):
        known = sorted({n for n, _ in _registry})
        raise UnknownJobType(f"unknown job type {name!r} version {version!r}"
                             + (f" (known: {', '.join(known[:20])})" if known else "")) from None


def all_types() -> list[JobType]:
    return sorted(_registry.values(), key=lambda jt: (jt.name, jt.version))


def validate(jt: JobType, payload: Any) -> dict:
    """Check ``payload`` against the type's contract; return it or raise :class:`InvalidPayload`."""
    validate_json(jt, payload)
    return payload


#: One encoder for every payload (json.dumps with options builds a new one per call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Its C core, built once: JSONEncoder.encode builds one per call, which is most of
# the cost for the small payloads jobs carry (profile of `bench --scenario enqueue_many`).
# No circular-reference markers: a payload that contains itself ends in RecursionError.
_c_encode = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)


def encode_payload(payload: dict) -> str:
    """A payload's compact JSON text (as :data:`_ENCODER` writes it)."""
    if _c_encode is None:
        return _ENCODER.encode(payload)
    try:
        return "".join(_c_encode(payload, 0))
    except RecursionError:
        raise ValueError("Circular reference detected") from None
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def validate_json(jt: JobType, payload: Any) -> str:
    """:func:`validate`, returning the payload's compact JSON text (serialised once, reused by enqueue)."""
    if not isinstance(payload, dict):
        raise InvalidPayload(f"{jt.name}: payload must be a JSON object, not {type(payload).__name__}")
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and PostgreSQL's jsonb rejects them.
        text = encode_payload(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{jt.name}: payload is not JSON-serialisable ({exc})") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        # jsonb cannot store a NUL character: refuse it here, not as a database error at insert.
        raise InvalidPayload(f"{jt.name}: payload contains a NUL character")
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidPayload(f"{jt.name}: payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} "
                             "(store large data elsewhere and pass its id)")
    if jt.fields:
        unknown = sorted(set(payload) - set(jt.fields))
        if unknown:
            raise InvalidPayload(f"{jt.name}: unknown field(s) {', '.join(unknown)}")
        for name, spec in jt.fields.items():
            if name not in payload or payload[name] is None:
                if spec.required:
                    raise InvalidPayload(f"{jt.name}: field {name!r} is required")
                continue
            value = payload[name]
            types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
            if isinstance(value, bool) and bool not in types:
                raise InvalidPayload(f"{jt.name}: field {name!r} must be {_names(types)}")
            # JSON has one number type: a float field takes 3 as well as 3.0.
            if not isinstance(value, types) and not (float in types and isinstance(value, int)
                                                     and not isinstance(value, bool)):
                raise InvalidPayload(f"{jt.name}: field {name!r} must be {_names(types)}")
            if spec.max_length is not None and hasattr(value, "__len__") and len(value) > spec.max_length:
                raise InvalidPayload(f"{jt.name}: field {name!r} is longer than {spec.max_length}")
            if spec.choices is not None and value not in spec.choices:
                raise InvalidPayload(f"{jt.name}: field {name!r} must be one of {', '.join(map(str, spec.choices))}")
    if jt.check:
        jt.check(payload)
    return text


def _names(types) -> str:
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "a boolean",
                        list: "a list", dict: "an object"}.get(t, t.__name__) for t in types)


def load_modules(modules) -> None:
    """Import the modules that define application job types."""
    for name in modules:
        importlib.import_module(name)


# Diagnostic types: used by `opsboard bench`, the demo and smoke tests.
define("diag.noop", handler="worker.handlers.diag:noop", max_attempts=3, timeout=10,
       description="Does nothing; measures the queue's own overhead.")
define("diag.sleep", handler="worker.handlers.diag:sleep", fields={"ms": Field((int, float))},
       max_attempts=3, timeout=60, description="Sleeps for ms milliseconds.")
define("diag.sleep", 2, handler="worker.handlers.diag:sleep", queue="critical", priority=0,
       fields={"ms": Field((int, float)), "sent_at": Field((int, float), required=False)},
       max_attempts=3, timeout=10, description="Critical-queue variant, for latency measurements.")

# Delivery types (webhook.fanout, webhook.deliver, email.send, sms.send, sms.otp, push.send).
from . import providers as _delivery_types  # noqa: E402,F401  (registers them; imports this module back)
# Built-in job types that live with their feature (reports: request, chunk, assemble, scheduled).
from . import reports as _reports  # noqa: E402,F401
from .tickets import service as _tickets  # noqa: E402,F401  (tickets.sla_check)
