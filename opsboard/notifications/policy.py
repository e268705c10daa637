"""Notification policy: what an event type notifies, to whom, on which channels.

Declare once per event type, in the owning feature's ``register(catalogue)``::

    from opsboard.notifications import policy

    policy.declare(
        catalogue, "ticket.assigned",
        category="ticket",                 # a category from CATEGORIES (or define_category)
        sensitivity="normal",              # or "sensitive": never in a push title; no SMS unless
                                           #   the category is approved for SMS
        channels=("inbox", "push", "email"),   # channels of the catalogue (opsboard.channels)
        recipients=lambda conn, event: [event["payload"]["assignee_id"]],   # platform user ids
        permission="tickets.view",         # the recipient must hold it in the event's tenant
        template="ticket.assigned",        # template key (default: the event type)
        variables=None,                    # callable(conn, event, user_id) -> dict for the template
                                           #   (default: the event payload)
        digest=None,                       # digest.window(minutes=10, key="ticket_id") or
                                           #   digest.daily("09:00"): one send per window (below)
    )

``declare`` also subscribes the event type to the ``notifications.fanout``
job through the outbox (subscriber ``notify``) in the same catalogue: nothing
else to wire.

For each recipient and channel, the rules run in this order and the first
that fails is recorded as the delivery's suppression reason (:func:`check`
states them for one recipient; the fan-out evaluates the same rules for a
whole chunk of recipients in SQL, ``notification_fanout_chunk``):

1. ``permission``   -- the recipient holds the policy's permission in the tenant;
2. ``membership``   -- the recipient's membership of the tenant is active;
3. ``preference``   -- the user (or tenant default) allows the category on the
   channel; a critical category (OTP, security) cannot be turned off;
4. ``quiet_hours``  -- inside the user's quiet window the channel is deferred to
   the window's end (not suppressed), unless the category is critical; the
   inbox itself is never deferred;
5. ``sensitivity``  -- sensitive content never goes by SMS (or another channel whose
   entry says ``sensitive="approved"``) unless the category is approved for SMS, and
   a push of sensitive content always carries the generic title only
   (:func:`opsboard.channels.sensitive_rules`).

Then the digest decision (:func:`digest_kind`, the one place; the chunk statement applies it
set-based): a passing channel other than the inbox, of a category that is not critical, is
collected into the recipient's open digest of (channel, category, key) when the policy digests, or
when the recipient is in quiet hours -- sent once at the window's end instead of once per item
(:mod:`opsboard.notifications.digest`).  The inbox row of every item is written as before.
"""
from __future__ import annotations

import uuid

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable

from .. import catalogue as _catalogue
from .. import channels as _channels
from .. import db, jobtypes, outbox
from . import digest as _digest

# The channels a policy may name are the catalogue's (opsboard.channels: inbox, push, sms, email and
# any an extension registers).  ``inbox`` is the source of truth; SSE is the live view of the inbox
# (no separate delivery).
SENSITIVITIES = ("normal", "sensitive")
#: The outbox subscriber name of the fan-out job.
SUBSCRIBER = "notify"
#: A critical delivery (OTP) is pointless after this, counted from the event.
CRITICAL_TTL = timedelta(minutes=2)


@dataclass(frozen=True)
class Category:
    name: str
    #: Cannot be turned off and ignores quiet hours (OTP, security alerts).
    critical: bool = False
    #: Sensitive content of this category may go by SMS (OTP, official, financial).
    sms_approved: bool = False
    description: str = ""


def define_category(catalogue: _catalogue.Catalogue, name: str, *, critical: bool = False,
                    sms_approved: bool = False, description: str = "") -> Category:
    """Register a notification category in ``catalogue``; redefining replaces it."""
    cat = Category(name, critical, sms_approved, description)
    catalogue.categories[name] = cat
    catalogue.changed()
    return cat


def categories() -> dict[str, Category]:
    """The active catalogue's categories, by name."""
    return _catalogue.active().categories


def category(name: str) -> Category:
    """The active catalogue's category (KeyError when unknown)."""
    return _catalogue.active().categories[name]


@dataclass(frozen=True)
class Audience:
    """A broadcast's recipients, read in pages: ``page(conn, event, after, limit)`` returns at most
    ``limit`` user ids greater than ``after`` (None: from the start), in ascending order.

    A policy with an audience fans out one page per ``notifications.fanout`` job (each its own short
    transaction, which enqueues the next page's job), so a tenant of 600,000 members never sits in
    Python at once nor holds the inbox for the whole broadcast.
    """

    name: str
    page: Callable[[Any, dict, Any, int], list]
    #: Recipients per page (one job, one transaction); 5,000 = one set-based chunk statement.
    page_size: int = 5000
    #: Pages of the broadcast written at once (job groups as lanes): 1 = one page at a time.
    lanes: int = 1


def tenant_members(roles: Iterable[str] | None = None, *, page_size: int = 5000, lanes: int = 2) -> Audience:
    """Every active member of the event's tenant (with one of ``roles``, when given), by keyset.

    ``lanes``: how many pages are written at once (:func:`opsboard.notifications.fanout.fan_out`).  Two by
    default: at 600,000 members on the shared 2-core machine two lanes took 25.4-29.7 s against 36.2-45.3 s
    for one, another tenant's p99 stayed under 100 ms when the claims were healthy, and the OTP's p99 was
    12-14 ms worse (docs/performance.md, "Broadcast, part 5").  ``lanes=1``: one page at a time.
    """
    wanted = sorted(set(roles)) if roles is not None else None

    def page(conn, event, after, limit):
        return [r["user_id"] for r in db.all_rows(conn, "notification_audience_members", {
            "tenant_id": event["tenant_id"], "roles": wanted, "after": after, "limit": limit})]
    if not 1 <= page_size <= 50_000:
        raise ValueError("page_size must be between 1 and 50,000")
    if not 1 <= lanes <= 8:
        raise ValueError("lanes must be between 1 and 8")
    return Audience("tenant_members" + (f"({','.join(wanted)})" if wanted else ""), page, page_size, lanes)


@dataclass(frozen=True)
class Policy:
    event_type: str
    category: str
    sensitivity: str
    channels: tuple[str, ...]
    recipients: Callable[[Any, dict], Iterable] | None
    permission: str | None
    template: str
    variables: Callable[[Any, dict, Any], dict] | None
    version: int
    audience: Audience | None = None
    #: One send per window for the channels other than the inbox (:mod:`.digest`); None: each item sends.
    digest: _digest.Digest | None = None


def declare(catalogue: _catalogue.Catalogue, event_type: str, *, category: str, channels: Iterable[str],
            recipients: Callable[[Any, dict], Iterable] | None = None, audience: Audience | None = None,
            sensitivity: str = "normal", permission: str | None = None, template: str | None = None,
            variables: Callable[[Any, dict, Any], dict] | None = None, version: int = 1,
            digest: _digest.Digest | None = None) -> Policy:
    """Declare the notification policy of ``event_type`` (see the module docstring).

    ``recipients(conn, event)`` gets the stored envelope (``payload`` upcast to
    ``version``) and returns platform user ids; a broadcast names an
    ``audience`` instead (:func:`tenant_members`), read in pages.  Exactly one of
    the two.  Redeclaring replaces.  ``digest``: :func:`opsboard.notifications.digest.window` or
    :func:`~opsboard.notifications.digest.daily` (refused for a critical category: it never waits).
    """
    known = catalogue.categories
    if category not in known:
        raise ValueError(f"unknown category {category!r} (known: {', '.join(sorted(known))})")
    if sensitivity not in SENSITIVITIES:
        raise ValueError(f"sensitivity must be one of {SENSITIVITIES}")
    chans = tuple(dict.fromkeys(channels))
    known_channels = catalogue.channels
    if not chans or any(c not in known_channels for c in chans):
        raise ValueError(f"channels must be among the catalogue's: {', '.join(sorted(known_channels))} "
                         f"(a channel's feature or extension registers it before the policies naming it)")
    if "inbox" not in chans:
        chans = ("inbox",) + chans  # every trackable notification lands in the inbox
    if (recipients is None) == (audience is None):
        raise ValueError("give recipients (callable(conn, event) -> user ids) or an audience, not both")
    if recipients is not None and not callable(recipients):
        raise ValueError("recipients must be callable(conn, event) -> user ids")
    if audience is not None and not isinstance(audience, Audience):
        raise ValueError("audience must be a policy.Audience (policy.tenant_members(...))")
    if digest is not None and not isinstance(digest, _digest.Digest):
        raise ValueError("digest must be digest.window(...) or digest.daily(...)")
    if digest is not None and known[category].critical:
        raise ValueError(f"a critical category ({category}) never waits in a digest")
    pol = Policy(event_type, category, sensitivity, chans, recipients, permission, template or event_type,
                 variables, int(version), audience, digest)
    catalogue.policies[event_type] = pol
    catalogue.changed()
    # A critical category (OTP, security) fans out on the critical queue, whose
    # reserved slots a backlog of other work can never take.
    critical = known[category].critical
    outbox.subscribe(catalogue, SUBSCRIBER, event_type, "notifications.fanout", version=pol.version,
                     queue="critical" if critical else None,
                     payload=lambda ev: {"event_id": str(ev["id"])})
    return pol


def policy_for(event_type: str) -> Policy | None:
    """The active catalogue's policy of an event type, if it has one."""
    return _catalogue.active().policies.get(event_type)


def policies() -> list[Policy]:
    """The active catalogue's policies, by event type."""
    return sorted(_catalogue.active().policies.values(), key=lambda p: p.event_type)


# ---------------------------------------------------------------- the checks

@dataclass(frozen=True)
class Decision:
    """``queued`` (send now), ``deferred`` (send at ``available_at``) or ``suppressed`` (``reason``)."""

    status: str
    reason: str | None = None
    available_at: datetime | None = None
    #: Push must use the generic title (sensitive content, whatever the category).
    generic: bool = False
    #: Collected into a digest of this kind (``window``, ``schedule``, ``quiet``), sent at ``available_at``.
    digest: str | None = None


@dataclass(frozen=True)
class RecipientFacts:
    """What the checks need to know about one recipient, loaded in bulk by the fan-out."""

    has_permission: bool
    membership_active: bool
    #: channel -> enabled (user's preference, else the tenant default, else True).
    preferences: dict[str, bool]
    #: End of the current quiet window when ``now`` is inside it, else None.
    quiet_until: datetime | None = None
    #: Whether the recipient can be reached on the channel at all (phone, email, device).
    reachable: dict[str, bool] | None = None
    #: The recipient's time zone (a scheduled digest) and the time of the decision (None: no flush time).
    time_zone: str | None = None
    now: datetime | None = None


def check(pol: Policy, channel: str, facts: RecipientFacts) -> Decision:
    """Run the rules in order for one recipient and channel; pure."""
    cat = category(pol.category)
    if not facts.has_permission:
        return Decision("suppressed", "permission")
    if not facts.membership_active:
        return Decision("suppressed", "membership")
    if not cat.critical and not facts.preferences.get(channel, True):
        return Decision("suppressed", "preference")
    if facts.reachable is not None and not facts.reachable.get(channel, True):
        return Decision("suppressed", "unreachable")
    deferred = channel != "inbox" and facts.quiet_until is not None and not cat.critical
    # Sensitive content never shows in a push title (a lock screen), SMS-approved or not; it goes
    # by SMS (or an extension's channel) only in an approved category (channels.sensitive_rules).
    refused, generics = _channels.sensitive_rules((channel,), sensitive=pol.sensitivity == "sensitive",
                                                  approved=cat.sms_approved)
    generic = bool(generics)
    if refused:
        return Decision("suppressed", "sensitivity")
    kind = digest_kind(pol, channel, facts.quiet_until)
    if kind is not None:
        due = facts.quiet_until if facts.now is None else _digest.flush_at(
            facts.now, kind, seconds=pol.digest.seconds if pol.digest else 0,
            at=pol.digest.at if pol.digest else None, time_zone=facts.time_zone, quiet_until=facts.quiet_until)
        return Decision("deferred", "quiet_hours" if kind == "quiet" else "digest", due, generic, kind)
    if deferred:
        return Decision("deferred", "quiet_hours", facts.quiet_until, generic)
    return Decision("queued", None, None, generic)


def digest_kind(pol: Policy, channel: str, quiet_until: datetime | None) -> str | None:
    """Whether a passing delivery waits in a digest, and which kind: the policy's (``window``,
    ``schedule``), else ``quiet`` inside the recipient's quiet hours, else None (sent now).  Never the
    inbox (it keeps every item) nor a critical category (an OTP never waits).  The chunk statement
    (``notification_fanout_chunk``) applies the same rule with :func:`digest_params`."""
    if channel == "inbox" or category(pol.category).critical:
        return None
    if pol.digest is not None:
        return pol.digest.kind
    return "quiet" if quiet_until is not None else None


def digest_params(pol: Policy, event: dict) -> dict:
    """The chunk statement's digest parameters of one event (see :func:`digest_kind`)."""
    return _digest.sql_params(pol.digest, event.get("payload") or {}, category(pol.category).critical)


def register(cat: _catalogue.Catalogue) -> None:
    """The notification tier's categories and job types (policies come with the features whose events
    they notify)."""
    define_category(cat, "otp", critical=True, sms_approved=True, description="One-time passwords.")
    define_category(cat, "security", critical=True, sms_approved=True, description="Sign-ins, password changes.")
    define_category(cat, "financial", sms_approved=True, description="Payments, invoices, refunds.")
    define_category(cat, "official", sms_approved=True, description="Legal and official notices.")
    define_category(cat, "account", description="Sign-ups and account changes.")
    define_category(cat, "ticket", description="Support ticket updates.")
    define_category(cat, "system", description="Platform notices.")
    jobtypes.define(cat, "notifications.fanout", handler="opsboard.notifications.handlers:fanout",
                    fields={"event_id": jobtypes.Field(uuid.UUID),
                            "after": jobtypes.Field(uuid.UUID, required=False)}, max_attempts=10, timeout=120,
                    description="One event -> inbox rows, deliveries and channel jobs for every recipient "
                                "(a broadcast: one page of its audience, after the user id in 'after').")
    jobtypes.define(cat, "notifications.deliver", handler="opsboard.notifications.handlers:deliver",
                    fields={"delivery_id": jobtypes.Field(uuid.UUID)}, max_attempts=5, timeout=30,
                    on_cancel="delivery_cancel_unsent",
                    description="One delivery (recipient x event x channel): render and hand to the provider job.")
    jobtypes.define(cat, "notifications.deliver_critical", handler="opsboard.notifications.handlers:deliver",
                    fields={"delivery_id": jobtypes.Field(uuid.UUID)}, queue="critical", priority=0, max_attempts=3,
                    timeout=10, on_cancel="delivery_cancel_unsent", description="A critical delivery (OTP, security) on the critical queue.")
