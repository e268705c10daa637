"""Tenancy the database enforces: the row-level-security scope of the current unit of work.

Every table with a ``tenant_id`` has row-level security enabled and forced (migration 0085): its
policy lets a statement see and write only the rows of the tenants named by the transaction-local
setting ``opsboard.tenant_scope``:

* ``''`` (unset): nothing.  A query that forgot its scope returns no rows and writes none.
* a comma-separated list of tenant ids: those tenants' rows (and, on the few tables whose
  ``tenant_id`` may be NULL, the platform's rows; see the migration for which may be written).
* ``'*'``: every tenant.  Only the bypasses of :class:`Bypass` set it, each with its reason.

The scope lives in a context variable (:func:`current`); the connection class of
:mod:`opsboard.db` writes it into each transaction with ``set_config(..., true)`` (``SET LOCAL``),
so it ends with the transaction and holds behind PgBouncer in transaction mode.  A statement run
outside a transaction while a scope is set is wrapped in one.

The web sets the scope from the signed-in user's memberships or the API key's tenant, the
worker from the job's tenant; the bypasses below are the only places where it is ``'*'``.
"""
from __future__ import annotations

import enum
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator

#: The setting the policies read (``current_setting('opsboard.tenant_scope', true)``).
SETTING = "opsboard.tenant_scope"
#: The setting's value for every tenant.
ALL = "*"


class Bypass(enum.Enum):
    """Every place where a unit of work sees every tenant's rows, with its reason.

    Add a member here (and nowhere else) to add a bypass; ``bypass(Bypass.X)`` is the only way to
    set the scope to every tenant."""

    #: The operator's staff: their dashboard shows every tenant (the operator scope of
    #: :class:`opsboard.auth.TenantScope`), and a job of the operator's own tenant acts for it.
    OPERATOR = "the operator's staff and the operator tenant's work see every tenant"
    #: The worker's claim and outcomes: one statement claims and finishes many tenants' jobs, fair
    #: between them; a scope per tenant would split the batch and the fairness with it.
    CLAIM = "the claim and the outcomes act on many tenants' jobs in one statement"
    #: Reaper, pruners, depth, expiry, relay, export, schedules, alerts, rollups: set-wise
    #: maintenance over every tenant's rows, run by the worker's leader and timers.
    MAINTENANCE = "maintenance services act on every tenant's rows set-wise"
    #: The stream server reads the inboxes of many signed-in users in one statement, each row by its
    #: recipient (the user its session proved); their tenants are many.
    STREAMS = "one read serves many signed-in users' inbox streams, row by recipient"
    #: Sign-in, session, API-key and portal-token lookups: the caller's tenant is what they find.
    AUTHENTICATION = "the caller's tenant is not known until their credentials are looked up"
    #: In the database, not here: ``opsboard_operator_staff_role(user)`` (migration 0099) reads the
    #: operator tenants' memberships in every tenant's scope, so that a tenant's pages can show
    #: operator staff by role, never by address; it returns the role and nothing else.
    STAFF_ROLES = "a tenant's pages name the operator's staff by role (migration 0099's function)"
    #: ``opsboard`` commands: whoever runs them holds the database's credentials.
    CLI = "command-line operations run with the database's own credentials"
    #: ``opsboard migrate`` and the demo's seed: structure and data for every tenant.
    SETUP = "migrations and demo data write every tenant's rows"


_scope: ContextVar = ContextVar("opsboard_tenant_scope", default=None)
#: The scope of a context that set none: nothing, except in a process that declared its own
#: (:func:`process_bypass`: the worker's services and the command line).
_process_default = ""


def current() -> str:
    """The scope of the current unit of work, as the setting's text.

    A web request sets a resolver (a callable) rather than a value: it runs at the request's first
    transaction (signing the caller in on the way) and its answer is kept for the request."""
    value = _scope.get()
    if value is None:
        return _process_default
    if callable(value):
        resolved = value()
        _scope.set(resolved)
        return resolved
    return value


def process_bypass(reason: "Bypass") -> None:
    """Make every context of this process that sets no scope of its own see every tenant, for
    ``reason``: the worker (its claim, outcomes and maintenance; each job's handler runs in the job's
    tenant, :func:`tenant`) and the command line."""
    global _process_default
    if not isinstance(reason, Bypass):
        raise TypeError("a bypass needs one of tenancy.Bypass as its reason")
    _process_default = ALL


def bypassing(reason: "Bypass"):
    """Decorator: the function runs with :func:`bypass` for ``reason``."""
    import functools

    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with bypass(reason):
                return fn(*args, **kwargs)
        return wrapped
    return decorate


def value_for(ids: Iterable) -> str:
    """The setting's text for these tenant ids (each checked to be a UUID: nothing else is written)."""
    return ",".join(str(uuid.UUID(str(i))) for i in ids if i is not None)


@contextmanager
def _set(value: str) -> Iterator[None]:
    token = _scope.set(value)
    try:
        yield
    finally:
        _scope.reset(token)


@contextmanager
def tenants(ids: Iterable) -> Iterator[None]:
    """Run the block in the scope of these tenants (an empty list: nothing is visible)."""
    with _set(value_for(ids)):
        yield


@contextmanager
def tenant(tenant_id) -> Iterator[None]:
    """Run the block in one tenant's scope."""
    with tenants([tenant_id]):
        yield


@contextmanager
def bypass(reason: Bypass) -> Iterator[None]:
    """Run the block seeing every tenant, for ``reason`` (one of :class:`Bypass`)."""
    if not isinstance(reason, Bypass):
        raise TypeError("a bypass needs one of tenancy.Bypass as its reason")
    with _set(ALL):
        yield


@contextmanager
def of(scope) -> Iterator[None]:
    """Run the block in an :class:`opsboard.auth.TenantScope`'s tenants (``all``: the operator scope)."""
    if scope.all:
        with bypass(Bypass.OPERATOR):
            yield
    else:
        with tenants(scope.ids):
            yield


def kept(value: str):
    """``with``: run the block in a scope taken earlier with :func:`current` (a streamed response's
    generator runs after its request ended, and with it the request's scope)."""
    return _set(value)


def enter(value):
    """Set the scope (a value, or a resolver called at first use) until :func:`leave` (for request
    hooks that cannot wrap a block)."""
    return _scope.set(value)


def leave(token) -> None:
    _scope.reset(token)


def set_for_thread(value) -> None:
    """Set the scope of the current context outright (a thread that serves one tenant at a time)."""
    _scope.set(value)


class OperatorTenants:
    """The operator's tenants (``tenants.is_operator``), re-read at most every ``ttl`` seconds: a
    job of one of them acts for the operator (:meth:`scope_of_job`).

    A worker enters a job's scope for every job it runs, so the scope's text is kept per tenant
    (cleared with each re-read) and entering it is one dictionary lookup and one context-variable
    set: the generator-based context managers above cost a measurable share of a no-op job."""

    _MAX_CACHED = 10_000

    def __init__(self, ttl: float = 30.0):
        import threading
        self.ttl, self._ids, self._at, self._lock = ttl, frozenset(), float("-inf"), threading.Lock()
        self._values: dict = {}

    def ids(self, pool) -> frozenset:
        import time
        now = time.monotonic()
        if now - self._at >= self.ttl:
            with self._lock:
                if now - self._at >= self.ttl:
                    with bypass(Bypass.OPERATOR), pool.connection() as conn:
                        rows = conn.execute("SELECT id FROM tenants WHERE is_operator").fetchall()
                    self._ids = frozenset(r["id"] if isinstance(r, dict) else r[0] for r in rows)
                    self._values = {}
                    self._at = now
        return self._ids

    def scope_of_job(self, pool, tenant_id) -> "_Entered":
        """A job's handler runs in its tenant's scope; a job of the operator's tenant, in every tenant's."""
        operators = self.ids(pool)
        value = self._values.get(tenant_id)
        if value is None:
            value = ALL if tenant_id in operators else value_for([tenant_id])
            if len(self._values) >= self._MAX_CACHED:
                self._values = {}
            self._values[tenant_id] = value
        return _Entered(value)


class _Entered:
    """``with``: the scope ``value`` for the block (a plain class: cheaper than a generator)."""

    __slots__ = ("value", "token")

    def __init__(self, value: str):
        self.value = value

    def __enter__(self):
        self.token = _scope.set(self.value)
        return self

    def __exit__(self, *exc):
        _scope.reset(self.token)
        return False
