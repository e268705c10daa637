"""The ``job_activity`` report kind: jobs per day, type and status of one tenant.
"""
from __future__ import annotations

import uuid
from datetime import date, datetime, time, timedelta, timezone
from typing import Iterator
from zoneinfo import ZoneInfo

from psycopg.rows import tuple_row

from .. import db
from ..persian import load_zone
from .kinds import pack, ReportError, Slice


MAX_DAYS = 3660


def _parse_date(params: dict, name: str) -> date:
    raw = params.get(name)
    try:
        return date.fromisoformat(str(raw).strip())
    except (ValueError, TypeError):
        raise ReportError("%(field)s must be a date like 2026-11-29", "invalid_date", params={"field": name}) from None


def _zone(name: str) -> ZoneInfo:
    found = load_zone(name)
    if found is None:
        raise ReportError("time_zone %(zone)s is not a time zone name like UTC or Asia/Tehran", "invalid_time_zone",
                          params={"zone": repr(name[:64] if isinstance(name, str) else name)})
    return found


def _activity_validate(params: dict) -> dict:
    unknown = sorted(set(params) - {"date_from", "date_to", "time_zone"})
    if unknown:
        raise ReportError("unknown parameter(s) %(names)s", "invalid_parameter", params={"names": ", ".join(unknown)})
    d_from, d_to = _parse_date(params, "date_from"), _parse_date(params, "date_to")
    tz = str(params.get("time_zone") or "UTC").strip()
    _zone(tz)
    if d_to < d_from:
        raise ReportError("date_to is before date_from", "invalid_date")
    if (d_to - d_from).days >= MAX_DAYS:
        raise ReportError("a report covers at most %(n)s days", "invalid_date", params={"n": MAX_DAYS})
    return {"date_from": d_from.isoformat(), "date_to": d_to.isoformat(), "time_zone": tz}


def _uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond."""
    ms = max(0, int(moment.timestamp() * 1000))
    return uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x2 << 62))


#: Ids are made in Python just before the insert; created_at is the transaction's start.
#: The id range is only a prefilter for the index, so it is a day wider on each side.
_ID_SLACK = timedelta(days=1)


def _activity_window(params: dict, lo_day: date | None = None, hi_day: date | None = None) -> dict:
    """Time and id bounds of the range (narrowed to [lo_day, hi_day] when given)."""
    zone = _zone(params["time_zone"])
    first = date.fromisoformat(params["date_from"])
    last = date.fromisoformat(params["date_to"])
    if lo_day is not None:
        first = max(first, lo_day)
    if hi_day is not None:
        last = min(last, hi_day)
    t_from = datetime.combine(first, time(0), zone)
    t_to = datetime.combine(last + timedelta(days=1), time(0), zone)
    return {"tz": params["time_zone"], "t_from": t_from, "t_to": t_to,
            "id_from": _uuid7_floor(t_from - _ID_SLACK), "id_to": _uuid7_floor(t_to + _ID_SLACK)}


def _stream_rows(conn, name: str, params: dict) -> Iterator[tuple]:
    """Rows of a named query as tuples, streamed row by row (single-row mode): constant memory,
    without the transaction a server-side cursor would hold open for the chunk's whole run."""
    with conn.cursor(row_factory=tuple_row) as cur:
        yield from cur.stream(db.queries[name], params)


def _activity_plan(conn, tenant_id, params: dict, max_rows: int) -> Iterator[Slice]:
    counts = ((({"day": d.isoformat(), "type": t}), n)
              for d, t, n in _stream_rows(conn, "report_activity_plan",
                                          {"tenant_id": tenant_id, **_activity_window(params)}))
    return pack(counts, max_rows)


def _activity_rows(conn, tenant_id, params: dict, lower: dict, upper: dict | None) -> Iterator[tuple]:
    lo_day = date.fromisoformat(lower["day"])
    hi_day = date.fromisoformat(upper["day"]) if upper else None
    window = _activity_window(params, lo_day, hi_day)
    q = {"tenant_id": tenant_id, **window, "lo_day": lo_day, "lo_type": lower["type"],
         "hi_day": hi_day, "hi_type": upper["type"] if upper else None}
    for day, type_, status, jobs in _stream_rows(conn, "report_activity_rows", q):
        yield day.isoformat(), type_, status, jobs


def _nightly_activity_payload(slot: datetime, tenant) -> dict:
    """Yesterday (in the schedule's zone, relative to the slot) for one tenant."""
    day = (slot.date() - timedelta(days=1)).isoformat()
    return {"kind": "job_activity", "params": {"date_from": day, "date_to": day, "time_zone": str(slot.tzinfo)},
            "source_key": f"reports.nightly_activity@{slot.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
            "schedule": "reports.nightly_activity"}
