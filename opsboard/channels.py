"""Notification channels: one catalogue entry each (``catalogue.channels``).

A channel says how a notification reaches a person once the policy has chosen it:

- ``reach(conn, delivery) -> target | None``: the address, phone number, devices or URL of the
  recipient on this channel, read when the deliver job runs (None: unreachable, the delivery is
  suppressed with reason ``unreachable``).  ``None`` instead of a function: the channel needs no
  address (the inbox, which the fan-out writes itself).
- how it is rendered: which template channel its text comes from (``template_channel``, its own
  name by default), the ``format`` the deliver job prepares (``text``; ``html``: a whole HTML
  document beside the tag-free text; ``title``: a short title only, generic for sensitive
  content), whether its templates need a ``subject``, and a ``max_length`` of the text it sends;
- ``hand_over(conn, delivery, rendered, target, *, critical, ttl) -> str``: enqueue the provider job in
  the deliver job's transaction and return the hand-over reference stored in
  ``deliveries.provider_ref`` (the delivery stays ``queued``; the provider job moves it on through
  :func:`record_outcome`, or through its own feature's queries); ``critical``: the category is
  critical (its job belongs on the critical queue), ``ttl``: the critical time to live, counted
  from now, past which a critical message is pointless;
- the delivery ``states`` it can reach, its ``label`` (an English message id of the translation
  catalogue, marked with ``opsboard.persian.marked``; ``labels`` gives a channel whose module is
  not in the catalogue its own ``{"fa": ..., "en": ...}``), and an optional ``sandbox`` text saying
  what receives it in the provider sandbox;
- what it does with ``sensitive`` content (a policy's ``sensitivity="sensitive"``): ``full`` (the
  inbox, email: the person's own mailbox), ``generic`` (push: a lock screen shows only the generic
  title), ``approved`` (SMS: only for a category approved for it, else suppressed with reason
  ``sensitivity``).  An extension's channel is ``approved`` unless it says otherwise: a third
  party carries its text.

The feature that owns the sending registers the channel: ``deliveries`` registers email, SMS and
push (their hand-overs enqueue its ``email.send``, ``sms.send`` / ``sms.otp`` and ``push.send``),
``notifications`` registers the inbox, and an extension module listed in ``OPSBOARD_JOB_MODULES``
registers its own with its own job type.  Policy, the deliver handler, preferences, templates, the
OpenAPI document and the dashboard read :func:`channel_names` / :func:`get`; the database checks a
channel value against ``notification_channels`` (migration 0068), whose rows every web and worker
start (and ``opsboard migrate``) upserts from the active catalogue (:func:`sync`).

Still bound to the built-in names, on purpose: the fan-out's one statement suppresses a missing
email address, phone number or push device set-based (a broadcast's fast path; another channel's
recipient is looked for by its ``reach`` when its deliver job runs), and the template sandbox
(``notifications.render``, whose preview processes have no catalogue) autoescapes ``email`` and
previews SMS parts and push truncation by name; any other channel renders as text.

Why here, beside ``jobtypes`` and ``outbox``, and not in ``opsboard.notifications``: the entry is
infrastructure that two features fill (deliveries and notifications) and an extension extends;
in a feature package, deliveries would import notifications to declare its channels.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg

from . import catalogue as _catalogue
from . import db

#: Every state a delivery can be in (``deliveries.status``; see docs/deliveries.md).  ``digested``: the item
#: went out inside a digest (opsboard.notifications.digest), reached by every channel with a hand-over.
DELIVERY_STATES = ("queued", "sent", "delivered", "failed", "bounced", "expired", "suppressed", "digested")
#: The formats the deliver job prepares a rendered text in (:class:`Rendered`).
FORMATS = ("text", "html", "title")
#: What a channel does with sensitive content (see the module docstring).
SENSITIVE_HANDLING = ("full", "generic", "approved")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class Unreachable(Exception):
    """Raised by a hand-over: the recipient cannot be reached on the channel after all (the delivery
    is suppressed, reason ``unreachable``)."""


class Refused(Exception):
    """Raised by a hand-over: the target is not acceptable (``code``: e.g. ``invalid_recipient``); the
    delivery fails for good with that error code."""

    def __init__(self, code: str = "invalid_recipient"):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Rendered:
    """What the deliver job hands over: the channel's live template rendered in the recipient's
    locale chain (else the inbox row's text), prepared in the channel's ``format``."""

    #: The subject (tag-free for an ``html`` channel; empty for a channel without a subject).
    subject: str
    #: The text, tag-free, cut to the channel's ``max_length``.
    text: str
    locale: str
    #: The template version used (None: the inbox row's text, no template of this channel).
    version: int | None = None
    #: ``html``: the whole document (``<html lang dir>``); else None.
    html: str | None = None
    #: ``title``: the short title (the generic one for sensitive content); else None.
    title: str | None = None
    #: Sensitive content: the channel must not show the text (push: the generic title only).
    generic: bool = False
    #: The notification's object, absolute on ``OPSBOARD_PUBLIC_URL`` when set (a push's deep link);
    #: None when it is about nothing with a page.
    link: str | None = None


@dataclass(frozen=True)
class Channel:
    """A notification channel (see the module docstring)."""

    name: str
    label: str
    hand_over: Callable[..., str] | None
    reach: Callable[[Any, dict], Any] | None
    template_channel: str
    format: str = "text"
    subject: bool = False
    max_length: int | None = None
    states: tuple[str, ...] = DELIVERY_STATES
    labels: dict[str, str] = field(default_factory=dict)
    sandbox: str | None = None
    #: Position on pages (the preference grid, template lists): lower first, then by name.
    position: int = 100
    #: The module that registered it (a row of ``notification_channels`` says so too).
    registered_by: str = ""
    #: Sensitive content: ``full``, ``generic`` or ``approved`` (:data:`SENSITIVE_HANDLING`).
    sensitive: str = "approved"


def define_channel(cat: _catalogue.Catalogue, name: str, *, label: str,
                   hand_over: Callable[..., str] | None, reach: Callable[[Any, dict], Any] | None = None,
                   template_channel: str | None = None, format: str = "text", subject: bool = False,
                   max_length: int | None = None, states: tuple[str, ...] | None = None,
                   labels: dict[str, str] | None = None, sandbox: str | None = None, position: int = 100,
                   registered_by: str = "", sensitive: str = "approved") -> Channel:
    """Register the notification channel ``name`` in ``cat``; redefining replaces it.

    ``hand_over`` may be None only for a channel the fan-out delivers itself (the inbox); ``reach``
    None means no address is needed.  ``states`` defaults to every delivery state; ``queued`` and
    ``suppressed`` are added when missing (every channel's delivery starts queued or suppressed).
    """
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"channel name {name!r} must be 1-32 lower-case letters, digits or '_', a letter first")
    if format not in FORMATS:
        raise ValueError(f"channel {name!r}: format must be one of {FORMATS}")
    if sensitive not in SENSITIVE_HANDLING:
        raise ValueError(f"channel {name!r}: sensitive must be one of {SENSITIVE_HANDLING}")
    if hand_over is not None and not callable(hand_over):
        raise ValueError(f"channel {name!r}: hand_over must be callable(conn, delivery, rendered, target, *, critical, ttl)")
    if reach is not None and not callable(reach):
        raise ValueError(f"channel {name!r}: reach must be callable(conn, delivery) -> target or None")
    wanted = tuple(states) if states is not None else DELIVERY_STATES
    unknown = [s for s in wanted if s not in DELIVERY_STATES]
    if unknown:
        raise ValueError(f"channel {name!r}: unknown delivery state(s) {unknown} (known: {DELIVERY_STATES})")
    wanted = tuple(s for s in DELIVERY_STATES if s in set(wanted) | {"suppressed"}
                   | ({"queued", "digested"} if hand_over is not None else set()))
    if max_length is not None and max_length < 1:
        raise ValueError(f"channel {name!r}: max_length must be positive")
    ch = Channel(name, label, hand_over, reach, template_channel or name, format, bool(subject), max_length,
                 wanted, dict(labels or {}), sandbox, int(position), registered_by, sensitive)
    cat.channels[name] = ch
    cat.changed()
    return ch


def channels() -> list[Channel]:
    """The active catalogue's channels, in page order (position, then name)."""
    return sorted(_catalogue.active().channels.values(), key=lambda c: (c.position, c.name))


def channel_names() -> tuple[str, ...]:
    """The active catalogue's channel names, in page order."""
    return tuple(c.name for c in channels())


def get(name: str) -> Channel | None:
    """The active catalogue's channel ``name``, if it has one."""
    return _catalogue.active().channels.get(name)


def sensitive_rules(names, *, sensitive: bool, approved: bool) -> tuple[list[str], list[str]]:
    """For a policy's channels ``names``: (the channels that refuse its content -- sensitive, in a
    category not approved for them -- and the channels that show only a generic title).  A name
    the active catalogue lacks is treated as ``approved`` (refused when not approved)."""
    if not sensitive:
        return [], []
    refused, generic = [], []
    for name in names:
        ch = get(name)
        handling = ch.sensitive if ch is not None else "approved"
        if handling == "approved" and not approved:
            refused.append(name)
        elif handling == "generic":
            generic.append(name)
    return refused, generic


def label_of(name: str, locale: str | None, translate: Callable[[str], str] = lambda s: s) -> str:
    """A channel's label for a reader in ``locale``: its own text in that locale (a channel of an
    extension), else ``translate(label)`` (the translation catalogue; the web passes gettext), else
    the name of an unknown channel (a row of a channel no longer registered)."""
    ch = get(name)
    if ch is None:
        return name
    if locale and locale in ch.labels:
        return ch.labels[locale]
    translated = translate(ch.label) if ch.label else ""
    if translated and translated == ch.label and ch.labels and locale != "en":
        # Not in the catalog (an extension's label): its own text, Persian first.
        return ch.labels.get("fa") or next(iter(ch.labels.values()))
    return translated or name


def record_outcome(conn: psycopg.Connection, channel: str, delivery_id, tenant_id, status: str,
                   error_code: str | None = None) -> dict | None:
    """A provider job's word about the delivery of ``channel`` it sends (``sent``, ``delivered``,
    ``failed``, ``bounced``, ``expired``): monotonic (a final state never changes, ``sent`` only moves on
    to a final one), so a repeated or late answer is a no-op (None).  A status the channel cannot reach
    is a bug of its provider job: ValueError, nothing written."""
    ch = get(channel)
    if ch is None or status not in ch.states:
        raise ValueError(f"channel {channel!r} cannot reach the delivery state {status!r}")
    return db.one(conn, "delivery_confirm", {"id": delivery_id, "tenant_id": tenant_id, "status": status,
                                             "error_code": error_code, "now": None})


def sync(conn: psycopg.Connection, catalogue: _catalogue.Catalogue | None = None) -> int:
    """Upsert a row of ``notification_channels`` for each channel of ``catalogue`` (default: the active
    one), so the foreign keys of deliveries, preferences and templates accept them; returns how many
    rows were written or changed.  One statement; a row already equal is not touched."""
    cat = catalogue or _catalogue.active()
    chans = sorted(cat.channels.values(), key=lambda c: c.name)
    if not chans:
        return 0
    rows = db.all_rows(conn, "notification_channel_upsert", {
        "names": [c.name for c in chans], "labels": [c.label for c in chans],
        "states": [",".join(c.states) for c in chans],
        "registered_by": [c.registered_by for c in chans]})
    return len(rows)


def sync_at_start(conn: psycopg.Connection) -> None:
    """A start hook (``catalogue.start_hooks``; the web app runs it too): :func:`sync`."""
    sync(conn)
