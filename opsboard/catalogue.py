"""The catalogue: every job type, provider, event, upcaster, subscription,
notification category and policy, shipped template, report kind and schedule
of one deployment, in one object built on purpose.

Nothing registers itself when a module is imported.  Each feature has one
``register(catalogue)`` function; :func:`opsboard.features.build_catalogue`
calls them in a fixed order from the configuration (extension modules named
in ``OPSBOARD_JOB_MODULES`` last, through their own ``register``).  The web
app and the worker are given the built catalogue and make it the process's
*active* one (:func:`activate`).

Why an active catalogue at all, rather than passing it to every call: a
producer enqueues or publishes with nothing but its database connection
(``enqueue(conn, "email.send", ...)``, ``publish(conn, "ticket.created", ...)``),
in code that is not ours; threading a catalogue through every such call would
put the wiring in every caller.  So the process holds one reference, set
explicitly at start (like Flask's ``current_app``), and the lookups of
:mod:`opsboard.jobtypes`, :mod:`opsboard.outbox` and the features read it.
Until something is activated the active catalogue is empty: importing
``opsboard.jobtypes`` alone knows no job type.

This module is the bottom of the core: it imports nothing of opsboard, and
the sections are plain dictionaries whose values the owning module builds
(``jobtypes.define``, ``outbox.define_event``, ``policy.declare``...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class ShippedTemplate:
    """A notification template the product ships (seeded as version 1, published, when missing)."""

    key: str
    channel: str
    locale: str
    subject: str
    body: str
    #: Comma-separated variable names the body may use.
    variables: str = ""
    #: The sample payload of the seeded version (preview on /templates/); default: each variable's name.
    sample: dict | None = None


@dataclass(frozen=True)
class Page:
    """A dashboard page a feature or an extension adds: a Flask blueprint the web app registers after
    its own, and a link in the main navigation for those who hold ``permission``.

    ``blueprint`` is a ``"module:attribute"`` path imported by the web app only (the core never
    imports Flask); ``labels`` is the link's text per locale (``fa`` is the fallback).
    """

    name: str
    blueprint: str
    endpoint: str
    permission: str
    labels: dict[str, str]
    #: Platform pages (every tenant's data) are shown to operator staff only.
    staff_only: bool = False

    def label(self, locale: str | None) -> str:
        """The link's text in ``locale``, else Persian, else any."""
        return self.labels.get(locale or "fa") or self.labels.get("fa") or next(iter(self.labels.values()))


@dataclass
class Catalogue:
    """The registries of one deployment (see the module docstring)."""

    #: ``(name, version) -> jobtypes.JobType``
    job_types: dict[tuple[str, int], Any] = field(default_factory=dict)
    #: ``name -> jobtypes.Provider``
    providers: dict[str, Any] = field(default_factory=dict)
    #: ``(name, version) -> outbox.EventType``
    event_types: dict[tuple[str, int], Any] = field(default_factory=dict)
    #: ``(name, from_version) -> payload -> payload``
    upcasters: dict[tuple[str, int], Callable[[dict], dict]] = field(default_factory=dict)
    #: ``event type -> [outbox.Subscription]``
    subscriptions: dict[str, list] = field(default_factory=dict)
    #: ``job type name -> fn(conn, jobs) -> int``: job types whose work the outbox relay does itself, in
    #: its transaction, instead of inserting their jobs (``outbox.run_at_relay``)
    run_at_relay: dict[str, Callable] = field(default_factory=dict)
    #: ``name -> notifications.policy.Category``
    categories: dict[str, Any] = field(default_factory=dict)
    #: ``event type -> notifications.policy.Policy``
    policies: dict[str, Any] = field(default_factory=dict)
    #: ``name -> channels.Channel``: the notification channels (inbox, push, sms, email, an extension's)
    channels: dict[str, Any] = field(default_factory=dict)
    #: Built-in message texts of direct sends: ``(name, version) -> (subject, body)`` (str.format).
    message_templates: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    #: Notification templates shipped with the product: ``(key, channel, locale) -> ShippedTemplate``.
    shipped_templates: dict[tuple[str, str, str], ShippedTemplate] = field(default_factory=dict)
    #: ``name -> reports.ReportKind``
    report_kinds: dict[str, Any] = field(default_factory=dict)
    #: ``name -> schedules.Schedule``
    schedules: dict[str, Any] = field(default_factory=dict)
    #: Leader-only maintenance services a feature contributes: ``name -> factory(config) -> service``
    #: (a service has ``name``, ``interval`` and ``run_once(conn, now=None) -> int``, like the
    #: worker's own in ``worker/services``; the worker's leader runs them beside its own).
    services: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: Run once by each worker as it starts, with a connection: ``name -> fn(conn)`` (seeding
    #: shipped templates a deployment skipped).  A hook that raises ``psycopg.Error`` is logged.
    start_hooks: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: Dashboard pages added by features or extensions: ``name -> Page``.
    pages: dict[str, Page] = field(default_factory=dict)
    #: What registered into it, in order (module names): for ``opsboard catalogue`` and errors.
    registered: list[str] = field(default_factory=list)
    #: Bumped by every change; derived tables (claim limits, relay routes) are cached per revision.
    revision: int = 0
    _derived: dict[Any, tuple[int, Any]] = field(default_factory=dict, repr=False)

    def changed(self) -> None:
        """Note a change: derived tables are computed again on their next use."""
        self.revision += 1

    def derived(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``, cached until the catalogue changes (hot-path tables: claim limits, relay routes)."""
        hit = self._derived.get(key)
        if hit is not None and hit[0] == self.revision:
            return hit[1]
        value = build()
        self._derived[key] = (self.revision, value)
        return value

    def ship_template(self, key: str, channel: str, locale: str, subject: str, body: str,
                      variables: str = "", sample: dict | None = None) -> ShippedTemplate:
        """Add a notification template the product ships: seeded as published version 1 where no version
        of ``(key, channel, locale)`` exists, by ``opsboard migrate`` and at web and worker start
        (:func:`opsboard.notifications.templates.seed_shipped`)."""
        tpl = ShippedTemplate(key, channel, locale, subject, body, variables, sample)
        self.shipped_templates[(key, channel, locale)] = tpl
        self.changed()
        return tpl

    def add_page(self, name: str, blueprint: str, *, endpoint: str, permission: str, labels: dict[str, str],
                 staff_only: bool = False) -> Page:
        """Add a dashboard page (see :class:`Page`); the web app registers it when it is created."""
        if ":" not in blueprint or not labels or not all(isinstance(v, str) and v for v in labels.values()):
            raise ValueError(f"page {name!r}: blueprint must be 'module:attribute' and labels non-empty text")
        if "." not in endpoint:
            raise ValueError(f"page {name!r}: endpoint must be 'blueprint.view'")
        page = Page(name, blueprint, endpoint, permission, dict(labels), staff_only)
        self.pages[name] = page
        self.changed()
        return page

    def summary(self) -> dict[str, int]:
        """How many entries each section holds."""
        return {"job_types": len(self.job_types), "providers": len(self.providers),
                "event_types": len(self.event_types), "upcasters": len(self.upcasters),
                "subscriptions": sum(len(s) for s in self.subscriptions.values()),
                "categories": len(self.categories), "policies": len(self.policies),
                "channels": len(self.channels),
                "message_templates": len(self.message_templates),
                "shipped_templates": len(self.shipped_templates), "report_kinds": len(self.report_kinds),
                "schedules": len(self.schedules), "services": len(self.services), "pages": len(self.pages)}


_active = Catalogue()


def active() -> Catalogue:
    """The process's catalogue (empty until :func:`activate`)."""
    return _active


def activate(catalogue: Catalogue) -> Catalogue:
    """Make ``catalogue`` the process's active one; returns the one it replaces."""
    global _active
    previous, _active = _active, catalogue
    return previous
