"""Preferences (user x category x channel, with tenant defaults), quiet hours, profiles.

A user's own preference wins over the tenant default; with neither, a channel
is on.  Critical categories ignore preferences (see :mod:`.policy`).  Quiet
hours are a window in the user's time zone on chosen ISO days; a window whose
end is not after its start runs over midnight and belongs to the day it
starts on.  :func:`quiet_until` is pure.
"""
from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import psycopg

from .. import db
from ..persian import load_zone
from ..errors import OpsError
from ..channels import channel_names
from .policy import categories


def quiet_until(now: datetime, time_zone: str, start: time, end: time, days) -> datetime | None:
    """The end of the quiet window containing ``now`` (aware, UTC-comparable), or None."""
    tz = load_zone(time_zone) or ZoneInfo("UTC")
    local = now.astimezone(tz)
    days = set(days or range(1, 8))
    for start_day in (local.date() - timedelta(days=1), local.date()):
        begin = datetime.combine(start_day, start, tzinfo=tz)
        finish_day = start_day + timedelta(days=1) if end <= start else start_day
        finish = datetime.combine(finish_day, end, tzinfo=tz)
        if start_day.isoweekday() in days and begin <= local < finish:
            return finish
    return None


def resolve(defaults: dict[str, bool], own: dict[str, bool]) -> dict[str, bool]:
    """channel -> enabled: the user's own choice, else the tenant default, else on."""
    return {c: own.get(c, defaults.get(c, True)) for c in channel_names()}


def check_choice(category: str, channel: str, enabled: bool) -> None:
    """Raise :class:`OpsError` for an unknown category or channel, or a critical category turned off."""
    cat = categories().get(category)
    if cat is None:
        raise OpsError(f"unknown category {category!r}", "invalid_category")
    if channel not in channel_names():
        raise OpsError(f"unknown channel {channel!r}", "invalid_channel")
    if cat.critical and not enabled:
        raise OpsError(f"{category} notifications cannot be turned off", "critical_category")


def set_preference(conn: psycopg.Connection, tenant_id, user_id, category: str, channel: str,
                   enabled: bool) -> dict:
    """Set a user's preference (``user_id`` None: the tenant default).

    A critical category's preferences are refused (``critical_category``):
    they would be ignored anyway, and the settings page must not pretend.
    """
    check_choice(category, channel, enabled)
    return db.one(conn, "notification_preference_set", {"tenant_id": tenant_id, "user_id": user_id,
                                                       "category": category, "channel": channel,
                                                       "enabled": bool(enabled)})


def set_quiet_hours(conn: psycopg.Connection, user_id, time_zone: str, start: time, end: time,
                    days=(1, 2, 3, 4, 5, 6, 7), enabled: bool = True) -> dict:
    """Set a user's quiet hours."""
    if load_zone(time_zone) is None:
        raise OpsError("unknown time zone", "invalid_time_zone")
    if start == end:
        raise OpsError("quiet hours need a start and an end that differ", "invalid_window")
    return db.one(conn, "quiet_hours_set", {"user_id": user_id, "time_zone": time_zone, "start_time": start,
                                            "end_time": end, "days": list(days), "enabled": enabled})


def grid(conn: psycopg.Connection, tenant_id, user_id) -> list[dict]:
    """The settings page's table: per category ``{category, critical, description, channels: {channel: on}}``.

    ``on`` is the effective value (own choice, else tenant default, else on);
    a critical category is always on.
    """
    defaults: dict = {}
    own: dict = {}
    for r in db.all_rows(conn, "notification_preference_list", {"tenant_id": tenant_id, "user_id": user_id}):
        (own if r["user_id"] else defaults).setdefault(r["category"], {})[r["channel"]] = r["enabled"]
    return [{"category": name, "critical": cat.critical, "description": cat.description,
             "channels": {c: True for c in channel_names()} if cat.critical
             else resolve(defaults.get(name, {}), own.get(name, {}))}
            for name, cat in categories().items()]


def save_choices(conn: psycopg.Connection, tenant_id, user_id, choices: dict[tuple[str, str], bool]) -> dict:
    """Save a user's ``{(category, channel): on}`` choices; returns what changed ``{"category.channel": on}``.

    Only a value that differs from the effective one is written, so an
    untouched cell keeps following the tenant default.  Everything is checked
    before anything is written: an unknown category or channel, or a critical
    category turned off, raises :class:`OpsError` and saves nothing.
    """
    for (category, channel), on in choices.items():
        check_choice(category, channel, on)
    current = {(row["category"], ch): on for row in grid(conn, tenant_id, user_id)
               for ch, on in row["channels"].items()}
    changed = {}
    for (category, channel), on in sorted(choices.items()):
        if current[(category, channel)] != on:
            set_preference(conn, tenant_id, user_id, category, channel, on)
            changed[f"{category}.{channel}"] = on
    return changed


def quiet_hours(conn: psycopg.Connection, user_id) -> dict | None:
    """A user's quiet hours row (enabled or not), or None."""
    return db.one(conn, "quiet_hours_get", {"user_id": user_id})


#: The languages a person's notifications can be written in (the shipped texts' and the catalogue's).
NOTIFICATION_LOCALES = ("fa", "en")


def set_locale(conn: psycopg.Connection, user_id, locale: str | None) -> dict:
    """Set the language of a person's notifications (issue 43): ``fa`` or ``en``; None follows their
    dashboard's language, then their tenant's default, then ``fa``.  Raises ``bad_locale`` (400)."""
    if locale is not None and locale not in NOTIFICATION_LOCALES:
        raise OpsError("Unknown language.", "bad_locale")
    return db.one(conn, "notification_profile_set_locale", {"user_id": user_id, "locale": locale})


def notification_locale(conn: psycopg.Connection, user_id, tenant_id) -> dict:
    """``{locale, effective_locale}``: the person's own choice (or None) and the language their
    notifications in ``tenant_id`` are written in -- their choice, else their dashboard's language,
    else the tenant's default, else ``fa`` (the first link of :func:`render.locale_chain`)."""
    from .render import locale_chain
    row = db.one(conn, "notification_profile_get", {"user_id": user_id, "tenant_id": tenant_id})
    if row is None:
        return {"locale": None, "effective_locale": locale_chain(None, None)[0]}
    own = row["locale"] or row["dashboard_locale"]
    return {"locale": row["locale"], "effective_locale": locale_chain(own, row["tenant_locale"])[0]}


def tenant_locale(conn: psycopg.Connection, tenant_id) -> str:
    """A tenant's default notification language (``fa`` when never set)."""
    return db.one(conn, "notification_tenant_locale", {"tenant_id": tenant_id})["locale"]


def set_tenant_locale(conn: psycopg.Connection, tenant_id, locale: str) -> dict:
    """Set a tenant's default notification language: ``fa`` or ``en`` (``bad_locale`` otherwise); the
    language of its people who chose none (and whose dashboard has none)."""
    if locale not in NOTIFICATION_LOCALES:
        raise OpsError("Unknown language.", "bad_locale")
    return db.one(conn, "notification_tenant_locale_set", {"tenant_id": tenant_id, "locale": locale})


def set_profile(conn: psycopg.Connection, user_id, *, locale: str | None = None, phone: str | None = None,
                time_zone: str | None = None) -> dict:
    """Set a user's locale, SMS number and time zone."""
    return db.one(conn, "notification_profile_set", {"user_id": user_id, "locale": locale, "phone": phone,
                                                     "time_zone": time_zone})
