"""Reports: kinds, keyset slicing, chunked generation and assembly into a CSV.

A report can read millions of rows; done in one piece it would run for
minutes, hit a lease or fill memory.  So a run is split:

1. :func:`request_report` writes a ``report_runs`` row (``queued``) and enqueues
   ``reports.request``, in the caller's transaction, with an audit row.
2. ``reports.request`` calls :func:`plan_run`: the kind walks its range in key
   order and cuts it into slices of at most ``report_chunk_rows`` source rows,
   bounded by keys (``lower <= key < upper``, keyset, never OFFSET); one
   ``report_chunks`` row and one ``reports.chunk`` job (queue ``bulk``,
   idempotency key ``chunk:<run>:<seq>``) per slice, all in one transaction.
3. ``reports.chunk`` calls :func:`run_chunk`: streams its slice's rows from a
   server-side cursor into a partial CSV in storage, then, in one
   transaction, marks the chunk done (once) and bumps the run's counter; the
   chunk that brings ``done_chunks`` to ``total_chunks`` enqueues
   ``reports.assemble`` (guarded by ``assemble_enqueued_at``: exactly once).
4. ``reports.assemble`` calls :func:`assemble_run`: writes the final CSV
   (UTF-8 with a BOM so spreadsheet apps read Persian text right, the header,
   then the parts in order, streamed) under one key, atomically, and marks
   the run ``ready``.

Every step is idempotent, so a retry (or a worker killed with SIGKILL) ends
in the same single file.  A job of a run that goes dead fails the run (a
trigger, see ``migrations/0008_reports.sql``); replaying it resumes the run.

A kind is one :func:`define_kind` call: its columns, parameters, how to plan
slices and how to read one slice.  ``job_activity`` is implemented; the
ticket SLA kind waits for the tickets tables.
"""
from __future__ import annotations

import codecs
import csv
import io
import re
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from typing import Callable, Iterable, Iterator
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from . import audit, db, queue
from .persian import load_zone
from . import catalogue as _catalogue
from .auth import TenantScope
from .errors import OpsError
from .jobtypes import Field, define
from .schedules import define_schedule
from .schema import new_id
from .storage import Storage

#: Source rows a chunk reads at most, unless configured (``OPSBOARD_REPORT_CHUNK_ROWS``).
DEFAULT_CHUNK_ROWS = 50_000
#: Rows fetched from the server per round trip while a chunk streams.
FETCH_ROWS = 2_000
BOM = codecs.BOM_UTF8

#: A spreadsheet reads a cell starting with one of these as a formula (or strips the control character and
#: then does): OWASP "CSV injection".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """``value`` as a CSV cell a spreadsheet shows as text: a string starting like a formula gets a ``'``.

    Every CSV export writes its rows through this (header included).  Numbers stay numbers: ``-5`` is
    a value, only a *string* starting with ``-`` is prefixed.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_row(row) -> list:
    return [csv_cell(v) for v in row]


class ReportError(OpsError):
    """A request the reports refuse (unknown kind, bad parameter, not found); ``code`` is stable.
    An :class:`~opsboard.errors.OpsError` (status from the code, message template and ``params``)."""

    def __init__(self, message: str, code: str = "invalid_report", *, params: dict | None = None):
        super().__init__(message, code, params=params)


@dataclass(frozen=True)
class Param:
    """One parameter of a kind, for the request form and validation."""

    name: str
    label: str
    type: str = "text"          # "date", "text", "time_zone"
    required: bool = True
    default: str | None = None


@dataclass(frozen=True)
class Slice:
    lower: dict
    upper: dict | None
    est_rows: int


@dataclass(frozen=True)
class ReportKind:
    name: str
    title: str
    columns: tuple[str, ...]
    params: tuple[Param, ...]
    #: ``validate(params) -> params``: normalised, or raise ReportError.
    validate: Callable[[dict], dict]
    #: ``plan(conn, tenant_id, params, max_rows) -> Iterable[Slice]`` in key order.
    plan: Callable[..., Iterable[Slice]]
    #: ``rows(conn, tenant_id, params, lower, upper) -> Iterator[tuple]`` in key order, streamed.
    rows: Callable[..., Iterator[tuple]]
    #: ``filename(params) -> str`` for the download.
    filename: Callable[[dict], str] = field(default=lambda p: "report.csv")
    description: str = ""


def define_kind(cat: _catalogue.Catalogue, kind: ReportKind) -> ReportKind:
    """Register a report kind in ``cat`` (one declaration per kind)."""
    cat.report_kinds[kind.name] = kind
    cat.changed()
    return kind


def get_kind(name: str) -> ReportKind:
    """The active catalogue's report kind, or :class:`ReportError` (``unknown_report_kind``)."""
    kinds = _catalogue.active().report_kinds
    try:
        return kinds[name]
    except (KeyError, TypeError):
        raise ReportError("unknown report kind %(kind)s (known: %(names)s)", "unknown_report_kind",
                          params={"kind": repr(name), "names": ", ".join(sorted(kinds))}) from None


def all_kinds() -> list[ReportKind]:
    """The active catalogue's report kinds, by name."""
    return sorted(_catalogue.active().report_kinds.values(), key=lambda k: k.name)


def pack(keyed_counts: Iterable[tuple[dict, int]], max_rows: int) -> Iterator[Slice]:
    """Cut ``(key, source rows)`` pairs, in key order, into slices of at most ``max_rows``
    source rows (a single key with more rows is a slice of its own).

    Streams: holds one slice's bounds at a time, never the keys.
    """
    lower, acc = None, 0
    for key, n in keyed_counts:
        if lower is None:
            lower, acc = key, n
        elif acc + n > max_rows:
            yield Slice(lower, key, acc)
            lower, acc = key, n
        else:
            acc += n
    if lower is not None:
        yield Slice(lower, None, acc)


# ---------------------------------------------------------------- requesting

def request_report(conn: psycopg.Connection, tenant_id, kind: str, params: dict, actor: audit.Actor, *,
                   request_key: str | None = None, source_key: str | None = None) -> dict:
    """Create a run and enqueue its request job in one transaction; audited.

    Idempotent on ``request_key`` (a double submit returns the first run) and
    on ``source_key`` (a schedule slot makes one run per tenant).
    """
    k = get_kind(kind)
    clean = k.validate(dict(params or {}))
    with conn.transaction():
        if request_key:
            previous = audit.find_by_request_key(conn, "report.request", request_key)
            if previous is not None:
                return _run_from_audit(conn, previous)
        run = db.one(conn, "report_run_insert", {
            "id": new_id(), "tenant_id": tenant_id, "kind": k.name, "params": Jsonb(clean),
            "requested_by": actor.id, "requested_label": actor.label, "source_key": source_key})
        if run is None:  # this schedule slot already made its run
            return db.one(conn, "report_run_get_by_source", {"tenant_id": tenant_id, "source_key": source_key})
        queue.enqueue(conn, "reports.request", {"run_id": str(run["id"])}, tenant=tenant_id,
                      idempotency_key=f"run:{run['id']}")
        rec = audit.record(conn, actor, "report.request", target_type="report", target_id=run["id"],
                           tenant_id=tenant_id, reason=f"{k.name} {clean}",
                           after={"run_id": str(run["id"]), "kind": k.name, "params": clean},
                           request_key=request_key)
        if rec is None:
            raise ReportError("this form was already submitted; reload the page", "request_key_reused")
    return run


def _run_from_audit(conn, record: dict) -> dict:
    run_id = (record.get("after") or {}).get("run_id")
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params}) if run_id else None
    if run is None:
        raise ReportError("this form key was used for another action", "request_key_reused")
    return run


def get_run(conn, run_id, scope: TenantScope) -> dict | None:
    """One run inside ``scope`` (with tenant slug and name), or ``None``."""
    return db.one(conn, "report_run_get", {"id": run_id, **scope.params})


def list_runs(conn, scope: TenantScope, *, tenant_id=None, limit: int = 50) -> list[dict]:
    """The newest runs inside ``scope``, each with its progress in percent."""
    rows = db.all_rows(conn, "report_run_list", {**scope.params, "tenant_id": tenant_id, "limit": limit})
    for r in rows:
        r["progress"] = progress(r)
    return rows


def progress(run: dict) -> int:
    """0..100: chunks done of the planned total (assembly is the last step)."""
    if run["status"] == "ready":
        return 100
    total = run["total_chunks"]
    if not total:
        return 0
    return min(99, int(100 * run["done_chunks"] / (total + 1)))


def chunks(conn, run_id) -> list[dict]:
    return db.all_rows(conn, "report_chunk_list", {"run_id": run_id})


def download_name(run: dict) -> str:
    name = get_kind(run["kind"]).filename(run["params"])
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def run_prefix(run: dict) -> str:
    return f"reports/{run['tenant_id']}/{run['id']}"


# ---------------------------------------------------------------- the steps (called by the worker's handlers)

def plan_run(conn: psycopg.Connection, run_id, *, max_rows: int = DEFAULT_CHUNK_ROWS,
             now: datetime | None = None) -> int:
    """Plan a queued run into slices and enqueue a chunk job per slice; returns the chunk count.

    One transaction under the run's lock: either every chunk row and job exists
    or none does, so a retried request job plans again from scratch.  A run
    already planned is left alone.  A run without data gets zero chunks and
    goes straight to assembly (a CSV with its header only).
    """
    with conn.transaction():
        run = db.one(conn, "report_run_lock", {"id": run_id})
        if run is None:
            raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
        if run["total_chunks"] is not None:
            return run["total_chunks"]
        kind = get_kind(run["kind"])
        jobs = []
        total = 0
        # Slices are few (source rows / max_rows): collect them, then write; the
        # plan's rows stream on this connection and nothing else may run meanwhile.
        for s in list(kind.plan(conn, run["tenant_id"], run["params"], max_rows)):
            seq = total
            db.execute(conn, "report_chunk_insert", {"run_id": run["id"], "seq": seq, "lower": Jsonb(s.lower),
                                                     "upper": Jsonb(s.upper) if s.upper is not None else None,
                                                     "est_rows": s.est_rows})
            jobs.append(queue.NewJob("reports.chunk", {"run_id": str(run["id"]), "seq": seq},
                                     tenant=run["tenant_id"], idempotency_key=f"chunk:{run['id']}:{seq}"))
            if len(jobs) >= 1000:
                queue.enqueue_many(conn, jobs)
                jobs = []
            total += 1
        queue.enqueue_many(conn, jobs)
        db.one(conn, "report_run_set_planned", {"id": run["id"], "total": total, "now": now})
        if total == 0:
            _enqueue_assemble(conn, run, now)
        return total


def _enqueue_assemble(conn, run: dict, now) -> bool:
    if db.one(conn, "report_run_mark_assemble", {"id": run["id"], "now": now}) is None:
        return False
    queue.enqueue(conn, "reports.assemble", {"run_id": str(run["id"])}, tenant=run["tenant_id"],
                  idempotency_key=f"assemble:{run['id']}")
    return True


def run_chunk(conn: psycopg.Connection, store: Storage, run_id, seq: int, *, job_id=None,
              cancelled=None, now: datetime | None = None) -> dict:
    """Write one slice's partial CSV and count it; returns ``{"rows", "counted", "assemble"}``.

    The part is written before the counter moves, so a chunk counted done
    always has its part.  A retry of a chunk already done changes nothing.
    """
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    chunk = db.one(conn, "report_chunk_get", {"run_id": run_id, "seq": seq})
    if chunk is None:
        raise ReportError("run %(id)s has no chunk %(seq)s", "not_found", params={"id": run_id, "seq": seq})
    if chunk["status"] == "done":
        return {"rows": chunk["row_count"], "counted": False, "assemble": False}
    if chunk["status"] == "failed":  # a replay of its dead job
        with conn.transaction():
            db.execute(conn, "report_chunk_reopen", {"run_id": run_id, "seq": seq, "job_id": job_id})
            db.one(conn, "report_run_resume", {"id": run_id})
    kind = get_kind(run["kind"])
    part_key = f"{run_prefix(run)}/parts/{seq:06d}.csv"
    rows = 0
    with store.open_write(part_key) as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=False)
        writer = csv.writer(out)
        for row in kind.rows(conn, run["tenant_id"], run["params"], chunk["lower_bound"], chunk["upper_bound"]):
            writer.writerow(csv_row(row))
            rows += 1
            if cancelled is not None and rows % FETCH_ROWS == 0 and cancelled.is_set():
                raise ReportError("chunk cancelled (lease lost or timed out)", "cancelled")
        out.flush()
        out.detach()
    with conn.transaction():
        counted = db.one(conn, "report_chunk_finish", {"run_id": run_id, "seq": seq, "rows": rows,
                                                       "part_key": part_key, "job_id": job_id, "now": now})
        if counted is None:
            return {"rows": rows, "counted": False, "assemble": False}
        c = db.one(conn, "report_run_count_chunk", {"id": run_id, "rows": rows})
        assemble = c["done_chunks"] == c["total_chunks"] and _enqueue_assemble(conn, run, now)
    return {"rows": rows, "counted": True, "assemble": assemble}


def assemble_run(conn: psycopg.Connection, store: Storage, run_id, *, now: datetime | None = None) -> dict:
    """Write the final CSV (BOM, header, parts in order) and mark the run ready; returns the run.

    The file appears under its key atomically; the parts are deleted after
    the run is marked ready (a retry finds the run ready and only tidies up).
    """
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    prefix = run_prefix(run)
    if run["status"] != "ready":
        parts = chunks(conn, run_id)
        if any(p["status"] != "done" for p in parts) or len(parts) != (run["total_chunks"] or 0):
            raise ReportError("run %(id)s has unfinished chunks", "chunks_unfinished", params={"id": run_id})
        kind = get_kind(run["kind"])
        key = f"{prefix}/{kind.name}.csv"
        with store.open_write(key) as raw:
            raw.write(BOM)
            out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            csv.writer(out).writerow(csv_row(kind.columns))
            out.flush()
            out.detach()
            for p in parts:
                with store.open_read(p["part_key"]) as part:
                    shutil.copyfileobj(part, raw, 1024 * 1024)
        with conn.transaction():
            updated = db.one(conn, "report_run_set_ready", {"id": run_id, "storage_key": key,
                                                            "byte_size": store.size(key), "now": now})
        run = updated or db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    # Tidy: the parts, and what killed writers left behind; only the result stays.
    for stale in store.list(prefix):
        if stale != run["storage_key"]:
            store.delete(stale)
    store.delete_prefix(f"{prefix}/parts")
    return run


def start_scheduled(conn: psycopg.Connection, tenant_id, kind: str, params: dict, source_key: str,
                    schedule: str) -> dict:
    """The run of one schedule slot for one tenant (made once, whoever asks twice)."""
    return request_report(conn, tenant_id, kind, params, audit.Actor(label=f"schedule:{schedule}"),
                          source_key=source_key)


# ---------------------------------------------------------------- kind: tenant job activity

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


def register(cat: _catalogue.Catalogue) -> None:
    """Report kinds, the report job types and the nightly schedule."""
    define_kind(cat, ReportKind(
        name="job_activity",
        title="Tenant job activity",
        columns=("day", "job_type", "status", "jobs"),
        params=(Param("date_from", "From (day)", "date"), Param("date_to", "To (day, inclusive)", "date"),
                Param("time_zone", "Time zone", "time_zone", required=False, default="UTC")),
        validate=_activity_validate,
        plan=_activity_plan,
        rows=_activity_rows,
        filename=lambda p: f"job-activity-{p['date_from']}-{p['date_to']}.csv",
        description="Jobs per day, type and status created in the range (days in the chosen time zone).",
    ))

    define(cat, "reports.request", handler="worker.handlers.reports:request", queue="bulk", long_running=True,
           fields={"run_id": Field(str, max_length=36)}, max_attempts=5, timeout=600, backoff_base=2,
           backoff_cap=60, description="Plans a report run into keyset slices and enqueues a chunk job per slice.")
    define(cat, "reports.chunk", handler="worker.handlers.reports:chunk", queue="bulk", long_running=True,
           fields={"run_id": Field(str, max_length=36), "seq": Field(int)}, max_attempts=5, timeout=900,
           backoff_base=2, backoff_cap=120,
           description="Writes one slice of a report run to storage; the last one enqueues the assembly.")
    define(cat, "reports.assemble", handler="worker.handlers.reports:assemble", queue="bulk", long_running=True,
           fields={"run_id": Field(str, max_length=36)}, max_attempts=5, timeout=1800, backoff_base=2,
           backoff_cap=120, description="Streams a run's parts into one CSV in storage; the run is then ready.")
    define(cat, "reports.scheduled", handler="worker.handlers.reports:scheduled", queue="bulk",
           fields={"kind": Field(str, max_length=100), "params": Field(dict), "source_key": Field(str, max_length=200),
                   "schedule": Field(str, max_length=100)},
           max_attempts=5, timeout=120, description="A schedule slot's report for one tenant: makes the run once.")
    define_schedule(cat, "reports.nightly_activity", "30 1 * * *", time_zone="Asia/Tehran", job_type="reports.scheduled",
                    payload=_nightly_activity_payload, per_tenant=True,
                    description="Yesterday's job activity report for every tenant, at 01:30 Tehran time.")
