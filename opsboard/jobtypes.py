"""The job type registry: ``(type, version) -> policy + payload contract``.

A producer cannot enqueue an unknown type/version or a payload that breaks its
contract: :func:`validate` raises before anything is written, so a job never
discovers a predictable user error late.  The handler is named by a dotted path
(``"opsboard.diagnostics:noop"``) and resolved only by the worker, so the core
never imports the worker.

Types live in the :class:`~opsboard.catalogue.Catalogue`: each feature's
``register(catalogue)`` calls :func:`define` and :func:`define_provider` on it,
and the lookups here (:func:`get`, :func:`all_types`, :func:`provider`,
:func:`concurrency_limits`) read the process's active catalogue.  Applications
define their own types in a module listed in ``OPSBOARD_JOB_MODULES`` that has a
``register(catalogue)`` function of its own.
"""
from __future__ import annotations

import json
import re
import uuid
import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from . import catalogue as _catalogue
from . import personal_data as _personal_data
from .config import QUEUE_NAMES, ConfigError
from .storable import problem

#: Largest payload accepted, as JSON bytes: payloads carry ids and options only.
MAX_PAYLOAD_BYTES = 16 * 1024


class JobTypeError(ValueError):
    """Base for enqueue-time errors; ``code`` is a stable identifier for APIs."""

    code = "invalid_job"


class UnknownJobType(JobTypeError):
    code = "unknown_job_type"


class InvalidPayload(JobTypeError):
    code = "invalid_payload"


class PersonalDataRefused(JobTypeError):
    """A payload string holds personal data (:mod:`opsboard.personal_data`); ``field`` is its path."""

    code = "personal_data"

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Field:
    """One payload field: its JSON type(s), whether required, and simple limits.

    ``uuid.UUID`` among the types means a JSON string in the canonical UUID form
    (``8-4-4-4-12`` hex digits): an id the handler looks up, refused at enqueue
    rather than failing in the worker.  ``min_length``/``max_length`` bound a
    string's characters or a list's items; ``choices`` is an enum.
    """

    types: type | tuple[type, ...]
    required: bool = True
    max_length: int | None = None
    choices: tuple | None = None
    min_length: int | None = None
    #: Declared personal data (a phone number the SMS needs): exempt from the personal-data screen.
    pii: bool = False


_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def field_problem(spec, name: str, value: Any) -> str | None:
    """Why ``value`` breaks the field ``spec`` (a :class:`Field` or an outbox ``EventField``), or None.

    The one check of a typed field, shared by job payloads and event payloads.
    """
    types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
    json_types = tuple(t for t in types if t is not uuid.UUID)
    if uuid.UUID in types and isinstance(value, str) and _UUID_RE.fullmatch(value):
        pass
    elif isinstance(value, bool) and bool not in json_types:
        return f"field {name!r} must be {_names(types)}"
    # JSON has one number type: a float field takes 3 as well as 3.0.
    elif not isinstance(value, json_types) and not (float in json_types and isinstance(value, int)):
        return f"field {name!r} must be {_names(types)}"
    if hasattr(value, "__len__"):
        if spec.max_length is not None and len(value) > spec.max_length:
            return f"field {name!r} is longer than {spec.max_length}"
        if getattr(spec, "min_length", None) is not None and len(value) < spec.min_length:
            return f"field {name!r} is shorter than {spec.min_length}"
    if spec.choices is not None and value not in spec.choices:
        return f"field {name!r} must be one of {', '.join(map(str, spec.choices))}"
    return None


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
    #: Most jobs of this type running at once per concurrency key (the key its ``concurrency_key``
    #: function computes from the job at enqueue), across all workers (None: no limit per key).
    key_concurrency: int | None = None

    def __post_init__(self):
        if self.queue not in QUEUE_NAMES:
            raise ValueError(f"queue {self.queue!r} is not one of {QUEUE_NAMES}")
        if self.max_attempts < 1 or self.timeout <= 0 or self.backoff_base < 0 or self.backoff_cap < 0:
            raise ValueError("max_attempts >= 1, timeout > 0, backoff base and cap >= 0")
        if not -32768 <= self.priority <= 32767:
            raise ValueError("priority must fit a smallint")
        if self.key_concurrency is not None and self.key_concurrency < 1:
            raise ValueError("key_concurrency must be at least 1")


@dataclass(frozen=True)
class JobType:
    name: str
    version: int
    #: The handler's ``"module:function"`` path (for display, logs and errors).
    handler: str
    policy: JobPolicy
    fields: dict[str, Field] = field(default_factory=dict)
    #: Extra check after the fields: raise InvalidPayload or return nothing.
    check: Callable[[dict], None] | None = None
    description: str = ""
    #: ``"module:function"`` run once for a claimed batch of this type before its handlers
    #: (one statement that loads and begins what each job would do on its own); resolved
    #: by the worker at start, like ``handler``.
    prepare_batch: str | None = None
    #: Its started effects are reconciled by sending again with the same id (webhooks:
    #: receivers dedupe on ``webhook-id``), so the ``started`` row is written without
    #: waiting for the WAL flush; ``confirmed`` stays durable.  See ``queue.begin_effect``.
    relaxed_effects: bool = False
    #: Producers may enqueue it over ``POST /api/v1/jobs``.  Internal types (a delivery, a fan-out,
    #: a report slice) are enqueued only by the product itself, which makes the rows they read.
    public: bool = False
    #: The name of a query (``opsboard/sql``) run in an operator's replay of a dead job of this type,
    #: in the replay's transaction, with the dead job's ``tenant_id`` and ``payload`` (jsonb): it
    #: puts back what the dead job's failure settled for good (the message and the notification
    #: delivery it failed go back to queued), so the replay's outcome is the one recorded.  It
    #: returns one row per thing reopened (``id``), which the replay's audit row lists.
    on_replay: str | None = None
    #: The name of a query run when jobs of this type are cancelled before they ran (an operator's
    #: cancel, one or many, or the producer's), in the cancel's transaction, with ``job_ids`` (uuid[],
    #: the cancelled jobs of this type) and ``now``: it settles what waited on them for good (the
    #: message and the notification delivery they would have sent are failed, error ``cancelled``),
    #: so nothing stays queued for a job that will never run.  One row per thing settled (``id``).
    on_cancel: str | None = None
    #: The handler function: given to :func:`define`, or imported from ``handler`` by
    #: :func:`resolve_handlers` when the catalogue is built.
    run: Callable | None = field(default=None, compare=False, repr=False)
    #: The ``prepare_batch`` function, likewise.
    prepare: Callable | None = field(default=None, compare=False, repr=False)
    #: ``key(payload, tenant_id) -> str | None``: the job's concurrency key, computed at enqueue and
    #: stored on the job (``jobs.concurrency_key``); with ``policy.key_concurrency`` (or an
    #: operator's live limit of kind ``key``) at most that many jobs of this type with one key run at
    #: once.  ``None`` (the function, or what it returns): no key.
    concurrency_key: Callable[[dict, Any], str | None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Provider:
    """An external service shared by several job types, with limits across all workers."""

    name: str
    #: Most jobs talking to it at once (None: no limit).
    concurrency: int | None = None
    #: Token bucket: sustained calls per second and burst size (None: no rate limit).
    rate_per_second: float | None = None
    burst: int | None = None
    #: Of ``concurrency``, the share that is the ``critical`` queue's own (None: no share, one
    #: limit for all queues).  See :func:`concurrency_limits`.
    critical_concurrency: int | None = None

    def rate_floor(self, queue: str) -> float:
        """Tokens a job of ``queue`` must leave in the provider's bucket: with a critical share,
        the other queues leave the same share of the burst to the critical queue, so a bulk send
        never takes the token an OTP needs (0 for the critical queue, or without a share)."""
        if queue == "critical" or not self.critical_concurrency or not self.concurrency or not self.burst:
            return 0.0
        return max(1.0, self.burst * self.critical_concurrency / self.concurrency)


def define_provider(cat: _catalogue.Catalogue, name: str, *, concurrency: int | None = None,
                    rate_per_second: float | None = None, burst: int | None = None,
                    critical_concurrency: int | None = None) -> Provider:
    """Register a provider's limits in ``cat``; redefining replaces them.

    ``critical_concurrency``: of the ``concurrency`` limit, how many jobs of the
    ``critical`` queue may talk to the provider at once, apart from the other
    queues' (which get the rest).  Critical claims then check and take their
    share under a lock of their own, never under the one default and bulk
    claims hold (see :func:`concurrency_limits`).  The same share of the rate
    bucket's burst is kept for them: the other queues' jobs take a token only
    while that reserve stays (:meth:`Provider.rate_floor`).
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError("provider concurrency must be at least 1")
    if rate_per_second is not None and rate_per_second <= 0:
        raise ValueError("provider rate must be positive")
    if critical_concurrency is not None and (concurrency is None or not 1 <= critical_concurrency < concurrency):
        raise ValueError("a provider's critical share must be at least 1 and below its concurrency")
    p = Provider(name, concurrency, rate_per_second, burst or (max(1, int(rate_per_second)) if rate_per_second else None),
                 critical_concurrency)
    cat.providers[name] = p
    cat.changed()
    return p


def provider(name: str | None) -> Provider | None:
    """The active catalogue's provider of that name (None for none)."""
    return _catalogue.active().providers.get(name) if name else None


@dataclass(frozen=True)
class ConcurrencyLimits:
    """The limits a queue's claim must respect, as arrays for SQL."""

    lock_names: tuple[str, ...]
    types: tuple[str, ...]
    type_limits: tuple[int, ...]
    type_groups: tuple[str, ...]
    groups: tuple[str, ...]
    group_limits: tuple[int, ...]
    #: Per group, whose running jobs count: ``""`` every queue's, ``"critical"`` the critical
    #: queue's only, ``"other"`` every other queue's (a provider with a critical share).
    group_sides: tuple[str, ...] = ()
    #: Types with a limit per concurrency key, and that limit (parallel; see JobType.concurrency_key).
    key_types: tuple[str, ...] = ()
    key_limits: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.lock_names


def concurrency_limits(queue: str, overrides: tuple[tuple[str, str, int], ...] = ()) -> ConcurrencyLimits:
    """Per-type and per-provider limits relevant to ``queue``'s claim (cached per catalogue revision).

    Every type of a limited provider is listed (their running jobs count
    against the provider); ``type_groups`` names each type's provider ("" when
    none).  ``lock_names`` are the advisory locks a claim takes (sorted, so
    claims never deadlock) to make check-and-claim atomic across workers.

    ``overrides``: limits an operator set live (``(kind, target, value)``,
    kind ``type`` or ``provider``; see :mod:`opsboard.pauses`), which replace
    the catalogue's for that type or provider.

    A provider with a critical share (``critical_concurrency``, R of its limit
    L) is two limits: the critical queue's claims check R against the
    provider's jobs running in the critical queue, under the lock
    ``provider:NAME@critical``; every other queue's claims check L - R against
    the rest, under ``provider:NAME``.  Together they never exceed L, and no
    critical claim waits on the lock a default or bulk claim holds through its
    statement and commit (during a 100,000-member broadcast, default claims held
    ``provider:sms_gateway`` most of the time and the OTP claim queued behind
    them: `opsboard bench --scenario broadcast`).  An operator's live limit L'
    keeps the split while L' >= 2 (the critical share: min(R, L' - 1)); at 1,
    one shared limit again.
    """
    cat = _catalogue.active()
    return cat.derived(("concurrency_limits", queue, overrides), lambda: _concurrency_limits(cat, queue, overrides))


def _concurrency_limits(cat: _catalogue.Catalogue, queue: str,
                        overrides: tuple[tuple[str, str, int], ...] = ()) -> ConcurrencyLimits:
    live = {(k, t): v for k, t, v in overrides}
    types: dict[str, tuple[int, str]] = {}
    groups: dict[str, tuple[int, str]] = {}
    keyed: dict[str, int] = {}
    locks: set[str] = set()
    critical = queue == "critical"
    for jt in cat.job_types.values():
        prov_name = jt.policy.provider
        prov = cat.providers.get(prov_name) if prov_name else None
        type_limit = live.get(("type", jt.name), jt.policy.concurrency)
        prov_limit = live.get(("provider", prov_name), prov.concurrency if prov is not None else None) \
            if prov_name else None
        key_limit = live.get(("key", jt.name), jt.policy.key_concurrency) if jt.concurrency_key is not None else None
        limited_type = type_limit is not None
        limited_prov = prov_limit is not None
        if key_limit is not None:
            # Its jobs are claimed under a lock of the type's keys (check-and-claim atomic across workers),
            # through the limited arm of the claim (a type limit of 1,000,000 when it has none).
            keyed[jt.name] = min(key_limit, keyed.get(jt.name, key_limit))
            if jt.policy.queue == queue:
                locks.add("keys:" + jt.name)
        if not (limited_type or limited_prov or key_limit is not None):
            continue
        group = ""
        if limited_prov:
            share = getattr(prov, "critical_concurrency", None)
            if share and prov_limit >= 2:
                # This queue's side of the split provider: its own group, lock and count.
                share = min(share, prov_limit - 1)
                group = prov_name + "@critical" if critical else prov_name
                groups[group] = (share, "critical") if critical else (prov_limit - share, "other")
            else:
                group = prov_name
                groups[group] = (prov_limit, "")
        limit = type_limit if limited_type else 1_000_000
        previous = types.get(jt.name)
        types[jt.name] = (min(limit, previous[0]) if previous else limit, group)
        if jt.policy.queue == queue:
            if limited_type:
                locks.add("type:" + jt.name)
            if limited_prov:
                locks.add("provider:" + group)
    if not locks:
        return ConcurrencyLimits((), (), (), (), (), ())
    names = sorted(types)
    keys = sorted(keyed)
    return ConcurrencyLimits(tuple(sorted(locks)), tuple(names), tuple(types[n][0] for n in names),
                             tuple(types[n][1] for n in names), tuple(sorted(groups)),
                             tuple(groups[g][0] for g in sorted(groups)), tuple(groups[g][1] for g in sorted(groups)),
                             tuple(keys), tuple(keyed[k] for k in keys))


_HANDLER_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def provider_types() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every job type that names a provider, and that provider, as two parallel tuples
    (cached per catalogue revision): what a provider pause holds (see ``pauses``)."""
    cat = _catalogue.active()

    def build():
        pairs = sorted({(jt.name, jt.policy.provider) for jt in cat.job_types.values() if jt.policy.provider})
        return tuple(t for t, _ in pairs), tuple(p for _, p in pairs)
    return cat.derived(("provider_types",), build)


def _path_of(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def define(cat: _catalogue.Catalogue, name: str, version: int = 1, *, handler: str | Callable,
           fields: dict[str, Field] | None = None, check: Callable[[dict], None] | None = None,
           description: str = "", prepare_batch: str | Callable | None = None, relaxed_effects: bool = False,
           public: bool = False, on_replay: str | None = None, on_cancel: str | None = None,
           concurrency_key: Callable[[dict, Any], str | None] | None = None,
           **policy: Any) -> JobType:
    """Register a job type in ``cat``; redefining the same (name, version) replaces it.

    ``handler`` (and ``prepare_batch``) is the function itself, which the feature that owns
    the type keeps beside its definition, or a ``"module:function"`` path that
    :func:`resolve_handlers` imports when the catalogue is built (an extension may name a
    handler in a module it would rather not import while registering).  ``public`` types
    may be enqueued over the HTTP API; the others only by the product's own code.  ``on_replay``
    names the query an operator's replay of a dead job runs (see :attr:`JobType.on_replay`),
    ``on_cancel`` the one a cancel of unstarted jobs runs (:attr:`JobType.on_cancel`).
    ``concurrency_key`` with ``key_concurrency=N``: at most N jobs of this type per key run at once
    (:attr:`JobType.concurrency_key`; docs/queue.md, "Concurrency keys").
    """
    if not name or len(name) > 100 or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"job type name {name!r} must be letters, digits, '.', '_' or '-'")
    functions: dict[str, Callable | None] = {}
    paths: dict[str, str | None] = {}
    for what, value in (("handler", handler), ("prepare_batch", prepare_batch)):
        if callable(value):
            functions[what], paths[what] = value, _path_of(value)
        elif value is None or (isinstance(value, str) and _HANDLER_RE.fullmatch(value)):
            functions[what], paths[what] = None, value
        else:
            raise ValueError(f"job type {name!r}: {what} {value!r} must be a function or 'module:function'")
    if paths["handler"] is None:
        raise ValueError(f"job type {name!r}: a handler is required")
    jt = JobType(name, int(version), paths["handler"], JobPolicy(**policy), dict(fields or {}), check, description,
                 paths["prepare_batch"], bool(relaxed_effects), bool(public), on_replay, on_cancel,
                 functions["handler"], functions["prepare_batch"])
    if concurrency_key is not None:
        if not callable(concurrency_key):
            raise ValueError(f"job type {name!r}: concurrency_key must be a function of (payload, tenant_id)")
        jt = dataclasses.replace(jt, concurrency_key=concurrency_key)
    cat.job_types[(jt.name, jt.version)] = jt
    cat.changed()
    return jt


def _import_path(path: str) -> Callable:
    module, _, attr = path.partition(":")
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def resolve_handlers(cat: _catalogue.Catalogue) -> None:
    """Import every handler and ``prepare_batch`` given by path in ``cat`` (``build_catalogue`` calls it).

    Raises :class:`~opsboard.config.ConfigError` (one line, exit status 2) naming the first type
    whose path points nowhere or at something that is not callable: a deployment that cannot run
    a type it may claim must not start.
    """
    for key, jt in list(cat.job_types.items()):
        found: dict[str, Callable | None] = {"run": jt.run, "prepare": jt.prepare}
        for what, attr, path in (("handler", "run", jt.handler), ("prepare_batch", "prepare", jt.prepare_batch)):
            if path is None or found[attr] is not None:
                continue
            try:
                fn = _import_path(path)
            except ImportError as exc:
                raise ConfigError(f"job type {jt.name} v{jt.version}: {what} {path!r} cannot be imported "
                                  f"({type(exc).__name__}: {exc})") from None
            except AttributeError:
                raise ConfigError(f"job type {jt.name} v{jt.version}: {what} {path!r}: the module has no "
                                  f"{path.partition(':')[2]!r}") from None
            if not callable(fn):
                raise ConfigError(f"job type {jt.name} v{jt.version}: {what} {path!r} is not callable")
            found[attr] = fn
        if found["run"] is not jt.run or found["prepare"] is not jt.prepare:
            cat.job_types[key] = dataclasses.replace(jt, run=found["run"], prepare=found["prepare"])
    cat.changed()


def handler_of(jt: JobType) -> Callable:
    """``jt``'s handler function (imported from its path when the catalogue was not resolved)."""
    return jt.run if jt.run is not None else _import_path(jt.handler)


def prepare_of(jt: JobType) -> Callable | None:
    """``jt``'s ``prepare_batch`` function, or None."""
    if jt.prepare is not None or jt.prepare_batch is None:
        return jt.prepare
    return _import_path(jt.prepare_batch)


def get(name: str, version: int = 1) -> JobType:
    """The active catalogue's type, or :class:`UnknownJobType`."""
    registry = _catalogue.active().job_types
    try:
        return registry[(name, int(version))]
    except (KeyError, ValueError, TypeError):
        known = sorted({n for n, _ in registry})
        raise UnknownJobType(f"unknown job type {name!r} version {version!r}"
                             + (f" (known: {', '.join(known[:20])})" if known else "")) from None


def all_types() -> list[JobType]:
    """The active catalogue's types, by name and version."""
    return sorted(_catalogue.active().job_types.values(), key=lambda jt: (jt.name, jt.version))


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


def unstorable_field(text: str, payload: Any) -> str | None:
    """Where ``payload`` (whose compact JSON is ``text``) holds a NUL or a lone surrogate, which jsonb
    cannot store (:func:`opsboard.storable.problem`); ``None`` when nowhere.  An all-ASCII text
    without a ``\\u0000`` escape holds neither: the payload is walked only otherwise."""
    if text.isascii() and "\\u0000" not in text:
        return None
    return problem(payload, "payload")


def validate_json(jt: JobType, payload: Any) -> str:
    """:func:`validate`, returning the payload's compact JSON text (serialized once, reused by enqueue)."""
    if not isinstance(payload, dict):
        raise InvalidPayload(f"{jt.name}: payload must be a JSON object, not {type(payload).__name__}")
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and PostgreSQL's jsonb rejects them.
        text = encode_payload(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{jt.name}: payload is not JSON-serializable ({exc})") from None
    where = unstorable_field(text, payload)
    if where is not None:
        # jsonb cannot store it: refused here, not as a database error at insert (a 500, a dead worker).
        raise InvalidPayload(f"{jt.name}: payload field {where} holds a character that cannot be stored "
                             "(a NUL or a lone surrogate)")
    # UTF-8 takes at most 4 bytes a character: a text that short is under the limit without encoding it.
    size = len(text.encode()) if len(text) > MAX_PAYLOAD_BYTES // 4 else 0
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
            problem = field_problem(spec, name, payload[name])
            if problem:
                raise InvalidPayload(f"{jt.name}: {problem}")
    if jt.check:
        jt.check(payload)
    return text


def screen_personal_data(jt: JobType, payload: Any, mode: str = "refuse") -> tuple[Any, list[str]]:
    """A producer's payload checked for personal data (the API's screen; jobs the product itself
    enqueues are not screened): ``(payload, redacted field paths)``.

    ``mode`` is the tenant's ``pii_mode``: ``refuse`` raises :class:`PersonalDataRefused` naming the
    first offending field; ``redact`` returns a copy with those string values replaced by
    :data:`opsboard.personal_data.MASK` (a key holding personal data is still refused).  Fields
    declared ``pii=True`` are exempt.
    """
    exempt = [name for name, spec in jt.fields.items() if spec.pii]
    if not isinstance(payload, dict):
        return payload, []
    if mode == "redact":
        out, redacted, bad_key = _personal_data.redact_in_payload(payload, exempt)
        if bad_key is None:
            return out, redacted
        path, kind = bad_key
        raise PersonalDataRefused(f"{jt.name}: a key under {path} looks like personal data ({kind}); "
                                  "keys cannot be redacted", path)
    found = _personal_data.find_in_payload(payload, exempt)
    if found:
        raise PersonalDataRefused(f"{jt.name}: {found[0]} looks like personal data ({found[1]}); pass ids, or "
                                  "declare the field pii=True", found[0])
    return payload, []


def _names(types) -> str:
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "a boolean",
                        list: "a list", dict: "an object", uuid.UUID: "a UUID string"}.get(t, t.__name__)
                       for t in types)
