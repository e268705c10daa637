"""The ops dashboard's reads and actions on jobs: the job list, a job's detail,
dead letters, resolutions and the redacted payload view.

Every function takes the caller's :class:`~opsboard.auth.TenantScope`; a row
outside it does not exist for the caller.  Replay and cancel are
:mod:`opsboard.jobqueue`'s; this module adds what only the dashboard needs.  No
Flask here: the blueprints in ``opsboard.web`` parse, authorize and render.
"""
from __future__ import annotations

import dataclasses

import json
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import audit, db, jobqueue
from .auth import TenantScope
from .config import WORKER_LIVE_SECONDS
from .errors import OpsError
from .persian import normalize_search
from .redact import _segments, redact, redact_payload  # noqa: F401  (the one redaction)
from .schema import JobStatus, uuid7_floor

#: Rows per page of the job list.
PAGE_SIZE = 50
#: The job page shows this much of the payload; the payload page shows it all.
PAYLOAD_PREVIEW_BYTES = 4096
#: The shortest search term: shorter ones cannot use the trigram indexes and
#: would read every attempt detail.
MIN_SEARCH = 3
#: Python and PostgreSQL clocks may disagree: time filters on created_at widen
#: their id bound by this much (the created_at test itself stays exact).
CLOCK_SLACK = timedelta(minutes=5)
#: A worker silent for longer is flagged stale (the one definition is config.WORKER_LIVE_SECONDS).
WORKER_STALE_SECONDS = WORKER_LIVE_SECONDS

RESOLUTIONS = ("resolved", "ignored")


def _rows(conn: psycopg.Connection, name: str, params: dict) -> list[dict]:
    # prepare=False: psycopg prepares a statement after a few runs, and a
    # prepared (generic) plan cannot fold "(param IS NULL OR ...)" away, so
    # every filter would scan.  Unprepared, PostgreSQL plans with the values.
    return conn.execute(db.queries[name], params, prepare=False).fetchall()


# ---------------------------------------------------------------- the job list

@dataclass
class JobFilter:
    """What the job list shows.  Empty fields do not filter.

    ``since``/``until`` bound ``created_at`` (until is exclusive); ``search``
    matches last_error_code and any attempt's detail (case-insensitive
    substring), or, when it is the beginning of a job id (8 hex digits or more,
    :func:`id_prefix_range`), the jobs whose id starts so; ``before`` is the
    keyset cursor: the last id of the previous page.
    """

    queue: str | None = None
    type: str | None = None
    tenant_id: uuid.UUID | None = None
    status: str | None = None
    error_code: str | None = None
    correlation_id: str | None = None
    event_id: uuid.UUID | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None
    before: uuid.UUID | None = None

    def validate(self) -> "JobFilter":
        """Raise :class:`~opsboard.errors.OpsError` (code ``invalid_filter``) on values no row can match."""
        if self.status is not None and self.status not in {s.value for s in JobStatus}:
            raise OpsError("status must be one of %(names)s", "invalid_filter",
                           params={"names": ", ".join(s.value for s in JobStatus)})
        if self.search is not None and len(self.search) < MIN_SEARCH:
            raise OpsError("search for at least %(n)s characters", "search_too_short", params={"n": MIN_SEARCH})
        if self.since and self.until and self.until <= self.since:
            raise OpsError("the end of the time range must be after its start", "invalid_filter")
        return self

    def args(self) -> dict[str, str]:
        """The filter as query-string arguments (without the cursor), for links."""
        out = {}
        for key, value in asdict(self).items():
            if value is None or key == "before":
                continue
            out[key] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out


def _shifted(moment: datetime, delta: timedelta) -> datetime:
    """``moment + delta``; ``moment`` itself where that would leave datetime's range (no OverflowError)."""
    try:
        return moment + delta
    except OverflowError:
        return moment


#: A search for the beginning of a job id: 8 to 32 hex digits, dashes where a UUID has them.
_ID_PREFIX = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{0,4}(-[0-9a-f]{0,4}(-[0-9a-f]{0,4}(-[0-9a-f]{0,12})?)?)?)?$")


def id_prefix_range(term: str | None) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids a search for the beginning of a job id covers (a primary-key range), or None.

    A term such as ``0190ab12`` or ``0190ab12-3c4d`` (pasted from a log or a
    page) is not text to look for in error codes: matching it there would read
    every error code and attempt detail and find nothing.
    """
    t = (term or "").strip().lower()
    if not _ID_PREFIX.match(t):
        return None
    digits = t.replace("-", "")
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


#: A text search reads the details of the attempts finished in this window:
#: the last one before now, or before the end of the filter's own time range
#: ("created until"), never further back than its start ("created from").  A
#: range set by hand is searched one window at a time, newest first, and the
#: page links to the window before (a day-long range read a day of attempts at
#: once).  The page's cost follows the attempts of the window, not the table:
#: each attempt's detail is tested, so the window is sized so that the busiest
#: half hour of the scale seed stays within the page's budget (`opsboard bench
#: --scenario scale`, docs/performance.md).
SEARCH_DETAIL_WINDOW = timedelta(minutes=30)
#: At most this many distinct error codes containing the term are searched (each one query).
SEARCH_MAX_CODES = 20


@dataclass
class JobPage:
    rows: list[dict]
    #: The cursor of the next (older) page, or None on the last page.
    next_before: uuid.UUID | None
    #: A text search: the attempts whose details it read finished at or after this (None: no text search).
    detail_since: datetime | None = None
    #: ... and before this (the end of the filter's range, or the time of the search).
    detail_until: datetime | None = None
    #: A text search whose time range reaches further back than the window read: the cursor
    #: (``until``) of the window before, for the page's link; None when nothing is left.
    detail_earlier: datetime | None = None


#: Statuses jobs_status_listed_idx holds (status, id).
_LISTED_STATUSES = frozenset({"pending", "retryable", "dead", "cancelled"})
#: Statuses jobs_tenant_listed_idx holds (tenant_id, status, id): not pending, which every job starts as.
_RARE_STATUSES = frozenset({"retryable", "dead", "cancelled"})


def _order_lead(scope: TenantScope, filter: JobFilter) -> tuple[str, str, str] | None:
    """The column to lead the job list's ORDER BY with, its test in the SQL and what replaces the test; or None.

    The newest jobs are the waiting ones (a backlog is the newest work), so for a
    status or an error code the planner, which assumes matches spread evenly over
    time, walks the primary key newest first past the whole backlog (every waiting
    job passed over for a few dead ones).
    Leading the ORDER BY with the column, which is equal on every row the filter
    keeps, changes nothing in the order, but only the index that starts with it
    provides that order, so the planner takes it.  The test becomes ``= ANY(ARRAY[
    value])``: an ``=`` would make the column a constant to the planner, which then
    drops it from the ORDER BY.  Not when a tenant bounds the list: jobs_tenant_idx
    does, and the tenant's own rows are the ones to walk.
    """
    if filter.search:
        return None
    if filter.tenant_id is None and not scope.all and len(scope.ids) == 1:
        # One tenant's viewer: its jobs of a status that few jobs reach, through
        # jobs_tenant_listed_idx (0043): its own scope test (tenant_id = ANY of one id)
        # leads, as the status above.  Several tenants: that index's order is not newest first.
        if filter.status in _RARE_STATUSES and filter.error_code is None:
            return "j.tenant_id", "", ""
        return None
    if filter.tenant_id is not None or not scope.all:
        return None
    if filter.error_code is not None:   # jobs_error_code_idx (0043)
        return ("j.last_error_code", "(%(error_code)s::text IS NULL OR j.last_error_code = %(error_code)s)",
                "j.last_error_code = ANY(ARRAY[%(error_code)s::text])")
    if filter.status in _LISTED_STATUSES:   # jobs_status_listed_idx (0025)
        return ("j.status", "(%(status)s::job_status IS NULL OR j.status = %(status)s)",
                "j.status = ANY(ARRAY[%(status)s::job_status])")
    return None


def list_jobs(conn: psycopg.Connection, scope: TenantScope, filter: JobFilter, *,
              limit: int = PAGE_SIZE) -> JobPage:
    """One page of jobs inside ``scope`` matching ``filter``, newest first."""
    filter.validate()
    params = {
        **scope.params, "queue": filter.queue, "type": filter.type, "tenant_id": filter.tenant_id,
        "status": filter.status, "error_code": filter.error_code, "correlation_id": filter.correlation_id,
        "event_id": filter.event_id, "since": filter.since, "until": filter.until,
        "since_id": uuid7_floor(_shifted(filter.since, -CLOCK_SLACK)) if filter.since else None,
        "until_id": uuid7_floor(_shifted(filter.until, CLOCK_SLACK)) if filter.until else None,
        "before": filter.before, "limit": limit + 1,
    }
    ids = id_prefix_range(filter.search)
    params["id_from"], params["id_to"] = ids or (None, None)
    params["pattern"] = _like_pattern(normalize_search(filter.search)) if filter.search and not ids else None
    if params["pattern"] is not None:
        return _search_jobs(conn, scope, filter, params, limit)
    rows = _list_rows(conn, scope, filter, params, limit)
    more = len(rows) > limit
    rows = rows[:limit]
    return JobPage(rows, rows[-1]["id"] if more and rows else None)


def _search_jobs(conn: psycopg.Connection, scope: TenantScope, filter: JobFilter, params: dict,
                 limit: int) -> JobPage:
    """A text search: the jobs whose attempts' details (finished in the search window) contain the
    term, and the jobs whose error code does (each distinct code containing it listed as the
    error-code filter lists it, through jobs_error_code_idx); the newest ``limit`` of both."""
    now = db.now(conn)
    end = min(filter.until, now) if filter.until else now
    start = end - SEARCH_DETAIL_WINDOW
    earlier = start  # the window before ends where this one starts
    if filter.since is not None and filter.since >= start:
        start, earlier = filter.since, None
    # No upper bound without "created until": an attempt finished at the search's own now()
    # (same transaction, or a host's clock a little ahead) is in the window.
    params["detail_since"], params["detail_until"] = start, filter.until
    found = {r["id"]: r for r in _list_rows(conn, scope, filter, params, limit, bounded_detail=True)}
    codes = [r["code"] for r in conn.execute(db.queries["dashboard_error_codes_matching"],
                                             {"pattern": params["pattern"], "limit": SEARCH_MAX_CODES},
                                             prepare=False).fetchall()]
    for code in codes:
        if filter.error_code is not None and filter.error_code != code:
            continue
        by_code = dataclasses.replace(filter, search=None, error_code=code)
        code_params = {**params, "pattern": None, "error_code": code}
        for r in _list_rows(conn, scope, by_code, code_params, limit):
            found.setdefault(r["id"], r)
    rows = sorted(found.values(), key=lambda r: r["id"], reverse=True)[:limit + 1]
    more = len(rows) > limit
    rows = rows[:limit]
    return JobPage(rows, rows[-1]["id"] if more and rows else None, detail_since=start, detail_until=end,
                   detail_earlier=earlier)


def _list_rows(conn: psycopg.Connection, scope: TenantScope, filter: JobFilter, params: dict,
               limit: int, bounded_detail: bool = False) -> list[dict]:
    """Up to ``limit`` + 1 rows of the job list (the extra one says that more exist)."""
    sql = db.queries["dashboard_job_list"]
    if bounded_detail:
        # The default window: read its attempts through the BRIN range only, never
        # the trigram index's matches over the whole table (see the query's comment).
        sql = sql.replace("a.detail_search ILIKE %(pattern)s", "coalesce(a.detail_search, '') ILIKE %(pattern)s")
    lead = _order_lead(scope, filter)
    if lead:
        column, test, replacement = lead
        if test:
            # The named queries are sent compacted (db._compact: no spaces around "="):
            # the test is looked for in that form.  Not found, the lead would be dropped
            # silently and the list walk the primary key past the backlog again (it did,
            # for the cancelled list at ten million jobs), so a miss is an error.
            sent = db._compact(test)
            if sent not in sql:
                raise RuntimeError(f"dashboard_job_list has no {sent!r} to replace")
            sql = sql.replace(sent, replacement)
        sql = sql.replace("ORDER BY j.id DESC", f"ORDER BY {column} DESC, j.id DESC")
    return conn.execute(sql, {"detail_since": None, "detail_until": None, **params}, prepare=False).fetchall()


def tenant_options(conn: psycopg.Connection, scope: TenantScope) -> list[dict]:
    """Tenants for filter menus, inside ``scope``."""
    return db.all_rows(conn, "dashboard_tenant_options", scope.params)


# ---------------------------------------------------------------- one job

def payload_text(payload: Any) -> str:
    """The redacted payload, pretty-printed (non-ASCII text kept readable)."""
    return json.dumps(redact_payload(payload), indent=2, ensure_ascii=False, default=str)


def cut_utf8(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes on a character boundary; and whether it was cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", errors="ignore"), True


@dataclass
class JobDetail:
    job: dict
    attempts: list[dict]
    replays: list[dict]
    #: The dead job this one replays (inside scope), or None.
    replay_of: dict | None
    payload_preview: str
    payload_cut: bool
    payload_bytes: int
    #: Ordered groups: unfinished jobs of the same group, and earlier jobs of it
    #: that died (the group moved on past them: a dead job does not block it).
    group_active: list[dict] = dataclasses.field(default_factory=list)
    group_dead_before: list[dict] = dataclasses.field(default_factory=list)
    #: The job's recorded result (opsboard.jobqueue.results), redacted and cut like the payload; None: none.
    result_preview: str | None = None


def job_detail(conn: psycopg.Connection, scope: TenantScope, job_id) -> JobDetail | None:
    """A job with its attempts, replays, resolution and redacted payload preview; ``None`` outside scope."""
    jid = _uuid_or_none(job_id)
    if jid is None:
        return None
    job = db.one(conn, "dashboard_job_get", {"id": jid, **scope.params})
    if job is None:
        return None
    audit.hide_staff(conn, scope, [job], id_key="resolution_actor_id", label_key="resolution_actor")
    text = payload_text(job["payload"])
    preview, cut = cut_utf8(text, PAYLOAD_PREVIEW_BYTES)
    original = None
    if job["replay_of"] is not None:
        original = db.one(conn, "dashboard_job_get", {"id": job["replay_of"], **scope.params})
    group_active, group_dead = [], []
    if job["group_key"] is not None:
        params = {"tenant_id": job["tenant_id"], "group_key": job["group_key"], "id": jid}
        group_active = db.all_rows(conn, "dashboard_group_active", params)
        group_dead = db.all_rows(conn, "dashboard_group_dead_before", params)
    return JobDetail(
        job=job, attempts=jobqueue.attempts(conn, jid),
        replays=db.all_rows(conn, "dashboard_job_replays", {"id": jid, **scope.params}),
        replay_of=original, payload_preview=preview, payload_cut=cut,
        payload_bytes=len(text.encode("utf-8")), group_active=group_active, group_dead_before=group_dead,
        result_preview=None if job.get("result") is None
        else cut_utf8(payload_text(job["result"]), PAYLOAD_PREVIEW_BYTES)[0])


def job_payload(conn: psycopg.Connection, scope: TenantScope, job_id) -> tuple[dict, str] | None:
    """A job and its whole redacted payload text; ``None`` outside scope."""
    job = jobqueue.get_job(conn, job_id, scope)
    if job is None:
        return None
    return job, payload_text(job["payload"])


def _uuid_or_none(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------- dead letters

#: The dead-letter groups count this many of the newest dead jobs (inside the
#: caller's scope and filters): counting every dead job ever kept grew without
#: bound.  The page says how far back it reaches.  Each dead job counted costs a
#: few buffers (the three "open" probes), so the window is sized to keep the page
#: within its budget at ten million jobs (`opsboard bench --scenario scale`).
DEAD_WINDOW = 2000


@dataclass
class NewestWindow:
    """What a page counted over the newest ``window`` rows of something (dead jobs, failed attempts):
    how many it counted and how far back they reach, so the page can say so."""

    window: int
    #: Rows counted (at most ``window``).
    counted: int
    #: The oldest row counted: older rows are left out when ``full``.
    since: datetime | None

    @property
    def full(self) -> bool:
        """Whether the window was filled, so that older rows may exist outside it."""
        return self.counted >= self.window


@dataclass
class DeadLetterGroups(NewestWindow):
    """Dead-letter groups over the newest ``window`` dead jobs."""

    groups: list[dict] = field(default_factory=list)


def dead_letter_groups(conn: psycopg.Connection, scope: TenantScope, *, queue_name: str | None = None,
                       tenant_id=None, include_handled: bool = False, limit: int = 500,
                       window: int | None = None) -> DeadLetterGroups:
    """The newest ``window`` dead jobs grouped by (type, last_error_code), newest failure first.

    Each group has ``open`` (neither replayed nor resolved/ignored), ``total``,
    ``newest`` / ``newest_open`` / ``oldest`` failure times, its queues and
    tenant count; groups with none open only with ``include_handled``.
    """
    window = window or DEAD_WINDOW
    sql = db.queries["dashboard_dead_groups"]
    if tenant_id is not None or (not scope.all and len(scope.ids) == 1):
        # One tenant: its dead jobs newest first come from jobs_dead_tenant_recent_idx,
        # which gives that order only with the tenant leading it (equal on every row).
        sql = sql.replace("ORDER BY j.id DESC", "ORDER BY j.tenant_id DESC, j.id DESC")
    rows = conn.execute(sql, {**scope.params, "queue": queue_name, "tenant_id": tenant_id, "window": window},
                        prepare=False).fetchall()
    counted = sum(int(r["total"]) for r in rows)
    since = min((r["oldest"] for r in rows if r["oldest"] is not None), default=None)
    groups = [r for r in rows if include_handled or r["open"] > 0][:limit]
    return DeadLetterGroups(window, counted, since, groups=groups)


def count_dead(conn: psycopg.Connection, scope: TenantScope, filter: jobqueue.DeadFilter) -> int:
    """How many dead jobs match ``filter`` (what :func:`opsboard.jobqueue.replay_many` would replay,
    up to its limit): the same query, asked for one row and its count."""
    rows = _rows(conn, "job_dead_select", {
        **scope.params, "type": filter.type, "queue": filter.queue, "tenant_id": filter.tenant_id,
        "error_code": filter.error_code, "since": filter.since, "until": filter.until,
        "open_only": filter.open_only, "limit": 1})
    return int(rows[0]["matched"]) if rows else 0


def replay_matching(conn: psycopg.Connection, scope: TenantScope, filter: jobqueue.DeadFilter, actor: audit.Actor,
                    reason: str, request_key: str, *, limit: int = 1000) -> jobqueue.BulkReplay:
    """Replay every dead job matching ``filter`` (see :func:`opsboard.jobqueue.replay_many`),
    then write one summary audit row ``job.replay_many`` listing the new job ids.

    Each replay has its own ``job.replay`` audit row and is idempotent on
    ``request_key:job_id``; a repeated request returns the same replays.
    """
    reason = audit.checked_reason(reason)
    description = {k: (str(v) if v is not None else None) for k, v in asdict(filter).items()}

    # One transaction: the replays and their summary land together, and a
    # concurrent identical request waits on the first replay's audit key.
    def perform(ctx: audit.ActionContext) -> jobqueue.BulkReplay:
        result = jobqueue.replay_many(conn, filter, actor, reason, request_key, scope=scope, limit=limit)
        # The distinct replay jobs (dead jobs that shared an idempotency key
        # share one), and every dead job replayed: the counts the page shows.
        ctx.write(tenant_id=_summary_tenant(filter, scope, result),
                  before={"matched": result.matched, "filter": description},
                  after={"job_ids": [str(r["id"]) for r in result.jobs],
                         "dead_job_ids": [str(r["dead_job_id"]) for r in result.replayed]})
        return result

    def repeat(previous: dict) -> jobqueue.BulkReplay:
        # A repeated submit: each dead job's own replay, found by its own key
        # (the first request's result, nothing new).
        after = previous["after"] or {}
        dead_ids = after.get("dead_job_ids")
        if dead_ids is None:   # recorded before dead_job_ids: the replay jobs only
            return jobqueue.BulkReplay(
                replayed=[{**(jobqueue.get_job(conn, i, scope) or {"id": uuid.UUID(i)}), "repeated": True}
                          for i in after.get("job_ids", [])],
                matched=(previous["before"] or {}).get("matched", 0))
        return jobqueue.BulkReplay(
            replayed=[jobqueue.replay(conn, d, actor, previous["reason"], f"{request_key}:{d}", scope=scope)
                      for d in dead_ids],
            matched=(previous["before"] or {}).get("matched", len(dead_ids)))

    return audit.operator_action(
        conn, actor, "job.replay_many", target_type="job_filter",
        target_id=json.dumps(description, sort_keys=True)[:500], reason=reason, request_key=request_key,
        perform=perform, repeat=repeat)


def _summary_tenant(filter: jobqueue.DeadFilter, scope: TenantScope, result: jobqueue.BulkReplay):
    """The tenant a bulk replay's summary audit row belongs to, so that the
    tenant's own staff see it: the filter's tenant, else the one tenant of the
    replayed jobs, else the caller's only tenant; ``None`` (operator staff
    only) when it spans tenants.  Never a tenant outside ``scope``: a filter
    naming another tenant matches nothing and writes nothing into its log."""
    if filter.tenant_id is not None and scope.allows(filter.tenant_id):
        return filter.tenant_id
    tenants = {r["tenant_id"] for r in result.replayed if r and r.get("tenant_id")}
    if len(tenants) == 1:
        return tenants.pop()
    if not tenants and not scope.all and len(scope.ids) == 1:
        return scope.ids[0]
    return None


# ---------------------------------------------------------------- resolutions

def resolve(conn: psycopg.Connection, job_id, resolution: str, actor: audit.Actor, reason: str,
            request_key: str | None, *, scope: TenantScope) -> dict:
    """Mark a dead job ``resolved`` or ``ignored`` with a reason; audited as ``job.resolve``.

    An operator action (:func:`opsboard.audit.operator_action`).  The dead
    job row is not touched: a ``job_resolutions`` row records the
    decision (one per job).  Idempotent on ``request_key`` (a key used for
    another job raises ``request_key_reused``).  Raises
    :class:`~opsboard.errors.OpsError`: ``reason_required``, ``invalid_resolution``,
    ``not_found``, ``invalid_status`` (not dead), ``already_resolved``.
    """
    reason = audit.checked_reason(reason)
    if resolution not in RESOLUTIONS:
        raise OpsError("resolution must be %(names)s", "invalid_resolution", params={"names": " or ".join(RESOLUTIONS)})
    jid = _uuid_or_none(job_id)
    if jid is None:
        raise OpsError("no such job", "not_found")

    def perform(ctx: audit.ActionContext) -> dict:
        job = jobqueue.get_job(conn, jid, scope)
        if job is None:
            raise OpsError("no such job", "not_found")
        if job["status"] != JobStatus.DEAD.value:
            raise OpsError("only dead jobs can be resolved; this one is %(status)s", "invalid_status",
                           params={"status": job["status"]})
        # The audit row first: a concurrent identical request waits on its
        # unique request key, then finds this one (rather than failing on the
        # one-resolution-per-job key below).
        ctx.write(tenant_id=job["tenant_id"], before={"status": "dead", "last_error_code": job["last_error_code"]},
                  after={"resolution": resolution, "job_ids": [str(job["id"])]})
        row = db.one(conn, "job_resolution_insert", {
            "job_id": job["id"], "resolution": resolution, "reason": reason, "actor": actor.label,
            "actor_id": actor.id})
        if row is None:
            existing = db.one(conn, "job_resolution_get", {"job_id": job["id"]})
            raise OpsError("this job was already %(resolution)s by %(actor)s", "already_resolved",
                           params={"resolution": existing["resolution"], "actor": existing["actor"]})
        return row

    return audit.operator_action(
        conn, actor, "job.resolve", target_type="job", target_id=jid, reason=reason, request_key=request_key,
        perform=perform,
        repeat=lambda previous: db.one(conn, "job_resolution_get", {"job_id": uuid.UUID(previous["target_id"])}) or {})


# ---------------------------------------------------------------- workers

def list_workers(conn: psycopg.Connection, scope: TenantScope, *, now: datetime | None = None,
                 stale_seconds: int = WORKER_STALE_SECONDS, jobs_per_worker: int = 20) -> list[dict]:
    """Worker rows, each with ``stale`` (silent for over ``stale_seconds``), ``seen_ago``
    seconds and the running jobs it holds inside ``scope`` (``running_count``, ``running``)."""
    return db.all_rows(conn, "dashboard_worker_list", {
        **scope.params, "now": now, "stale_seconds": stale_seconds, "jobs_per_worker": jobs_per_worker})


#: The queue health page's top error codes count the newest this many failed attempts of
#: the last hour (inside the scope): reading and joining all of the hour's failures to their
#: jobs grew with the failure rate.  The page says how far back they reach when the window is
#: full.  Each one counted is an index entry and its job's row, so the cost is bounded by the
#: window (`opsboard bench --scenario scale`, docs/performance.md).
TOP_CODES_WINDOW = 1000


@dataclass
class TopErrorCodes(NewestWindow):
    """The error codes behind the most failed attempts among the newest ``window`` of the last hour."""

    codes: list[dict] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.codes)

    def __iter__(self):
        return iter(self.codes)


def top_error_codes(conn: psycopg.Connection, scope: TenantScope, *, minutes: int = 60, limit: int = 5,
                    now: datetime | None = None, window: int | None = None) -> TopErrorCodes:
    """The error codes behind the most failed attempts of the last ``minutes``, per type and queue,
    counted over the newest ``window`` (default :data:`TOP_CODES_WINDOW`) failed attempts inside ``scope``."""
    window = window or TOP_CODES_WINDOW
    since = db.now(conn, now) - timedelta(minutes=minutes)
    name = "dashboard_top_error_codes" if scope.all else "dashboard_top_error_codes_scoped"
    rows = db.all_rows(conn, name, {**scope.params, "since": since, "window": window})
    counted = sum(int(r["failures"]) for r in rows)
    oldest = min((r["oldest"] for r in rows), default=None)
    rows.sort(key=lambda r: (-int(r["failures"]), r["error_code"], r["type"]))
    return TopErrorCodes(window, counted, oldest, codes=rows[:limit])


#: A bulk replay's confirmation counts this many open dead jobs at most ("1,000+"): as
#: many as a request replays (opsboard.web.jobs.BULK_LIMIT).  Counting every match read a
#: dead job's row and three indexes for each, twice: a common filter at ten million jobs
#: grew with the dead jobs kept; the cap bounds it.
REPLAY_COUNT_CAP = 1000


def replay_preview(conn: psycopg.Connection, scope: TenantScope, filter: jobqueue.DeadFilter, *,
                   cap: int = REPLAY_COUNT_CAP) -> dict:
    """For a bulk replay's confirmation: ``matched`` open dead jobs (counted up to ``cap`` + 1, so
    ``matched > cap`` means "more than ``cap``"), ``permanent``: how many of those counted died of a
    permanent error (before their last attempt; "at least" when the count stopped), and
    ``tenant_name``, the filter's tenant."""
    return db.one(conn, "dashboard_replay_preview", {
        **scope.params, "type": filter.type, "queue": filter.queue, "tenant_id": filter.tenant_id,
        "error_code": filter.error_code, "cap": cap + 1})
