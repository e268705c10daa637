"""The one place the product is wired: :func:`build_catalogue`.

Each feature contributes through its own ``register(catalogue)``; this module
calls them in a fixed order (what others build on first: job types and
providers, then the notification tier that feature policies use, then the
features), then the extension modules named in ``OPSBOARD_JOB_MODULES``, each
through its ``register``.  ``create_app`` and the worker are given the result
(or build it from their configuration) and make it the process's active
catalogue; importing any module registers nothing.
"""
from __future__ import annotations

import importlib
from typing import Iterable

from . import alerts, deliveries, diagnostics, jobtypes, reports, tickets
from .catalogue import Catalogue
from .jobqueue import workflows
from .config import Config, ConfigError
from .notifications import registration as notifications
from .outbox import export as event_export

#: The product's own features, in the order they register.
FEATURES = (
    ("diagnostics", diagnostics.register),
    ("deliveries", deliveries.register),
    ("notifications", notifications.register),
    ("tickets", tickets.register),
    ("reports", reports.register),
    ("alerts", alerts.register),
    ("workflows", workflows.register),
    ("event_export", event_export.register),
)


def build_catalogue(config: Config | None = None, *, modules: Iterable[str] | None = None) -> Catalogue:
    """A new catalogue with every feature and the extension ``modules`` (default: the configuration's
    ``job_modules``) registered, in that order, every handler given by path imported.

    An extension module must have a ``register(catalogue)`` function; one that cannot be imported, has
    none, or fails while registering raises :class:`ConfigError` naming it (the CLI and the worker stop
    with one line and status 2).
    """
    cat = Catalogue()
    for name, register in FEATURES:
        register(cat)
        cat.registered.append(name)
    if modules is None:
        modules = config.job_modules if config is not None else ()
    for name in modules:
        register_module(cat, name)
    jobtypes.resolve_handlers(cat)
    return cat


def register_module(cat: Catalogue, name: str) -> None:
    """Import the extension module ``name`` and call its ``register(cat)``."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"OPSBOARD_JOB_MODULES: cannot import {name!r} ({exc})") from None
    register = getattr(module, "register", None)
    if not callable(register):
        raise ConfigError(f"OPSBOARD_JOB_MODULES: {name!r} has no register(catalogue) function")
    try:
        register(cat)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"OPSBOARD_JOB_MODULES: {name}.register failed: {exc}") from None
    cat.registered.append(name)
