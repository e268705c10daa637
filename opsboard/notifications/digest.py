"""Digests: one send for many notifications of a category, per recipient and window.

A policy opts in (:func:`opsboard.notifications.policy.declare` with ``digest=``)::

    policy.declare(cat, "ticket.message_added", category="ticket", channels=("inbox", "email"),
                   recipients=..., digest=digest.window(minutes=10, key="ticket_id"))
    policy.declare(cat, "report.ready", category="system", channels=("inbox", "email"),
                   recipients=..., digest=digest.daily("09:00"))

* :func:`window` -- the digest is sent ``minutes`` after its first item;
* :func:`daily` -- at the next ``HH:MM`` in the recipient's time zone (their notification profile's,
  Asia/Tehran by default), whatever time the first item came;
* ``key`` -- one payload field: items with different values go in different digests (one per ticket).

Without ``digest=``, what arrives in a recipient's quiet hours is collected the same way (kind
``quiet``) and sent as one digest when the window ends; a digest's send never comes before the end
of the quiet window it was opened in.  A critical category (OTP, security) is never collected.
The inbox keeps every item as it comes: a digest is a delivery on the other channels (email, SMS,
push, an extension's), never a replacement of inbox rows.  :func:`opsboard.notifications.policy.digest_kind`
is the one decision; the fan-out's chunk statement applies it set-based (``notification_fanout_chunk``).

How it runs (migration 0076): the first item's delivery on a channel opens the digest -- the
digest's id is that delivery's -- and is queued with its deliver job at :func:`flush_at`; every
later item of the window becomes a delivery in status ``digested`` naming the digest.  The head's
deliver job is the flush (a scheduled job, no sleeping handler): it closes the digest
(:func:`close`) in the transaction that hands the digest text to the channel's provider job, so an
item that arrives after it opens the next window and nothing is counted twice.  With one item the
head is sent as itself; with more, with the shipped template ``notifications.digest``
(:data:`TEMPLATES`: the count and the first and the last item's titles, the day in the recipient's
calendar -- Jalali in fa).  Exactly one digest per (recipient, channel, key, window): one open
digest per key (a partial unique index the fan-out's upsert arbitrates on), one job per digest (its
id), and the provider job's effect record, so a worker killed mid-flush sends it once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import psycopg

from .. import db
from ..persian import format_day, load_zone, zone

#: The shipped template of a digest's text.
TEMPLATE_KEY = "notifications.digest"
KINDS = ("window", "schedule", "quiet")
#: The longest window: a digest that waits longer is a report, not a notification.
MAX_WINDOW = timedelta(days=7)
#: A payload value longer than this is cut before it keys a digest.
KEY_CHARS = 200


@dataclass(frozen=True)
class Digest:
    """A policy's digest: ``kind`` ``window`` (``seconds`` from the first item) or ``schedule`` (daily at
    ``at`` in the recipient's time zone), optionally keyed by one payload field ``key``."""

    kind: str
    seconds: int = 0
    at: time | None = None
    key: str | None = None

    def key_of(self, payload: dict) -> str:
        """The digest key of an event's payload: the field's value as text ('' without a field or value)."""
        if not self.key:
            return ""
        value = (payload or {}).get(self.key)
        return "" if value is None else str(value)[:KEY_CHARS]


_FIELD = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")


def _check_key(key: str | None) -> None:
    if key is not None and not _FIELD.match(key):
        raise ValueError("a digest key is one payload field name (lowercase letters, digits, '_')")


def window(*, minutes: float | None = None, seconds: int | None = None, key: str | None = None) -> Digest:
    """A digest sent ``minutes`` (or ``seconds``) after its first item."""
    if (minutes is None) == (seconds is None):
        raise ValueError("give a window's minutes or seconds")
    total = int(seconds if seconds is not None else round(minutes * 60))
    if not 1 <= total <= MAX_WINDOW.total_seconds():
        raise ValueError("a digest window is between 1 second and 7 days")
    _check_key(key)
    return Digest("window", seconds=total, key=key)


def daily(at: str | time, *, key: str | None = None) -> Digest:
    """A digest sent every day at ``at`` (``"09:00"``) in the recipient's time zone."""
    if isinstance(at, str):
        try:
            at = time.fromisoformat(at)
        except ValueError:
            raise ValueError("a digest's time is HH:MM") from None
    if not isinstance(at, time) or at.tzinfo is not None:
        raise ValueError("a digest's time is a local HH:MM, without a zone")
    _check_key(key)
    return Digest("schedule", at=at.replace(second=0, microsecond=0), key=key)


def flush_at(now: datetime, kind: str, *, seconds: int = 0, at: time | None = None, time_zone: str | None = None,
             quiet_until: datetime | None = None) -> datetime:
    """When a digest opened at ``now`` is sent; pure, the same rule as the SQL ``opsboard_digest_flush_at``
    (migration 0076): a window ``seconds`` from now, or the next ``at`` in ``time_zone`` (unknown: UTC),
    and never before the end of the quiet window ``quiet_until``."""
    if kind == "window":
        due = now + timedelta(seconds=seconds)
    elif kind == "schedule":
        tz = load_zone(time_zone) or load_zone("UTC")
        local = now.astimezone(tz)
        due = datetime.combine(local.date(), at, tzinfo=tz)
        if due <= now:
            due = datetime.combine(local.date() + timedelta(days=1), at, tzinfo=tz)
    elif kind == "quiet":
        if quiet_until is None:
            raise ValueError("a quiet-hours digest needs the window's end")
        return quiet_until
    else:
        raise ValueError(f"kind must be one of {KINDS}")
    return max(due, quiet_until) if quiet_until is not None else due


def sql_params(pol_digest: Digest | None, payload: dict, critical: bool) -> dict:
    """The chunk statement's digest parameters of one event (``digest_kind`` NULL: only quiet hours
    collect; a critical category never)."""
    d = None if critical else pol_digest
    return {"digest_kind": d.kind if d else None, "digest_seconds": d.seconds if d else 0,
            "digest_at": d.at if d else None, "digest_key": d.key_of(payload) if d else ""}


# ---------------------------------------------------------------- the flush

def close(conn: psycopg.Connection, delivery: dict) -> dict | None:
    """Close the digest whose head is ``delivery`` (its deliver job, in its transaction) and return it with
    its first and last items' titles and the recipient's time zone; None when the delivery heads no digest.

    Closing twice returns the same row (a retried job): the count is the one sent.  ``taken``: another
    run of the flush handed it over meanwhile (send nothing).  The row lock
    orders it with the fan-out's upsert of the same key: an item written before it is counted here, an
    item after it opens the next digest.
    """
    if delivery.get("digest_id") != delivery["id"]:
        return None
    params = {"id": delivery["id"], "tenant_id": delivery["tenant_id"], "now": None}
    row = db.one(conn, "notification_digest_close", params)
    if row is None:
        return None
    # Two flushes of one digest at once (a lease that ran out under a slow first run): the second waited
    # for the first's row lock above; this statement's fresh snapshot shows it handed over (``taken``).
    head = db.one(conn, "notification_digest_head_state", params)
    return {**row, "taken": head is None or head["status"] != "queued" or head["provider_ref"] is not None,
            "provider_ref": head["provider_ref"] if head else None}


def variables(row: dict, locale_chain: list[str]) -> dict:
    """The shipped digest template's variables: ``count``, ``first_title``, ``last_title``, ``category``, and
    the day of the digest in the recipient's zone and calendar: ``day`` (Jalali with Persian digits when the
    recipient reads fa, else ISO) -- ``day_fa`` and ``day_en`` both, for an author's template."""
    when = row["closed_at"] or row["flush_at"]
    local = when.astimezone(zone(row.get("time_zone"), locale_chain[0] if locale_chain else None)).date()
    day_fa = format_day(local, locale="fa", calendar="jalali")
    day_en = format_day(local, locale="en")
    return {"count": row["item_count"], "first_title": row.get("first_title") or row["first_event_type"],
            "last_title": row.get("last_title") or row["last_event_type"], "category": row["category"],
            "day": day_fa if (locale_chain or ["fa"])[0] == "fa" else day_en, "day_fa": day_fa, "day_en": day_en}


def pending(conn: psycopg.Connection, tenant_ids, *, limit: int = 50) -> list[dict]:
    """Open digests of the given tenants (None: every tenant, the operator's scope), soonest first."""
    return db.all_rows(conn, "notification_digests_pending", {"tenant_ids": None if tenant_ids is None
                                                              else list(tenant_ids), "limit": limit})


# ---------------------------------------------------------------- the shipped text

_VARS = "count, first_title, last_title, day"
#: Bidi isolates around an item's title: an English title in a Persian sentence stays in its order.
_ISO = "\u2068{{ %s }}\u2069"
#: (channel, locale, subject, body) of :data:`TEMPLATE_KEY`.
TEMPLATES = [
    ("email", "fa", "{{ count|fa_digits }} اعلان تازه — {{ day }}",
     "<p>از آخرین پیام، <b>{{ count|fa_digits }}</b> اعلان تازه دارید.</p>"
     "<p>نخستین: «<bdi>{{ first_title }}</bdi>»<br>آخرین: «<bdi>{{ last_title }}</bdi>»</p>"
     "<p>همهٔ آن‌ها در صندوق اعلان‌های شما هست.</p>"),
    ("email", "en", "{{ count }} new notifications — {{ day }}",
     "<p>You have <b>{{ count }}</b> new notifications since the last message.</p>"
     "<p>First: “<bdi>{{ first_title }}</bdi>”<br>Last: “<bdi>{{ last_title }}</bdi>”</p>"
     "<p>All of them are in your inbox.</p>"),
    ("sms", "fa", "",
     "{{ count|fa_digits }} اعلان تازه. نخستین: «" + _ISO % "first_title" + "» آخرین: «" + _ISO % "last_title" + "»"),
    ("sms", "en", "",
     "{{ count }} new notifications. First: “" + _ISO % "first_title" + "” Last: “" + _ISO % "last_title" + "”"),
    ("push", "fa", "{{ count|fa_digits }} اعلان تازه",
     "نخستین: «" + _ISO % "first_title" + "» آخرین: «" + _ISO % "last_title" + "»"),
    ("push", "en", "{{ count }} new notifications",
     "First: “" + _ISO % "first_title" + "” Last: “" + _ISO % "last_title" + "”"),
]
SAMPLE = {"count": 5, "first_title": "Ticket #1042 was assigned to you", "last_title": "New reply on ticket #1042",
          "day": "۱۴۰۵/۰۹/۱۶"}


def ship_templates(cat) -> None:
    """Register :data:`TEMPLATES` (seeded where missing by ``opsboard migrate`` and at start)."""
    for channel, locale, subject, body in TEMPLATES:
        cat.ship_template(TEMPLATE_KEY, channel, locale, subject, body, _VARS, dict(SAMPLE))
