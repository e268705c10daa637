"""Queue health: depth, age, throughput, retry rate, handler times; Prometheus exposition.

Two sources, both cheap at any backlog size:

* ``queue_depth`` — unfinished and dead jobs by queue, type, tenant and status,
  sampled every few seconds by the leader's depth service;
* ``job_stats`` — per-minute handler counters and time histograms written by
  every worker in batches.

The functions here return plain rows for the dashboard; :class:`QueueCollector`
serves the same numbers to Prometheus at ``/metrics``.
"""
from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from . import db
from .auth import TenantScope
from .config import DEFAULT_QUEUE_AGE_TARGET, QUEUE_NAMES, WORKER_LIVE_SECONDS, queue_age_target

#: Upper bounds (ms) of the handler-time histogram buckets in job_stats.duration_hist;
#: the last bucket (index len(DURATION_BUCKETS_MS)) counts everything slower.
DURATION_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


STATUSES = ("pending", "running", "retryable", "dead")


def bucket_index(duration_ms: int) -> int:
    """The histogram bucket of a handler time."""
    return bisect.bisect_left(DURATION_BUCKETS_MS, duration_ms)


def hist_quantile(hist: list[int], q: float) -> float | None:
    """Estimate the ``q`` quantile (0..1) in ms from bucket counts (upper bound of its bucket)."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        seen += count
        if seen >= rank and count:
            return float(DURATION_BUCKETS_MS[i]) if i < len(DURATION_BUCKETS_MS) else float("inf")
    return float("inf")


def add_hists(a: list[int] | None, b: list[int]) -> list[int]:
    if a is None:
        return list(b)
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


@dataclass
class TypeHealth:
    queue: str
    type: str
    depth: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    oldest_ready: datetime | None = None
    oldest_age_seconds: float | None = None
    per_minute: float | None = None      # completions per minute, last 5 minutes
    retry_rate: float | None = None      # retried / attempts, last hour
    dead_last_hour: int | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    over_target: bool = False


@dataclass
class QueueHealth:
    queue: str
    types: list[TypeHealth] = field(default_factory=list)
    depth: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    oldest_age_seconds: float | None = None
    per_minute: float | None = None
    retry_rate: float | None = None
    dead_last_hour: int | None = None
    target_seconds: float = DEFAULT_QUEUE_AGE_TARGET
    over_target: bool = False
    series_ok: list[int] = field(default_factory=list)
    series_failed: list[int] = field(default_factory=list)
    sampled_at: datetime | None = None


#: Stale groups whose oldest waiting job a fold re-reads, and the entries of
#: each tenant's waiting jobs it reads for one (queue_depth_oldest_refresh).
OLDEST_REFRESH_GROUPS = 500
OLDEST_REFRESH_SCAN = 200


def _keys(rows) -> Jsonb:
    return Jsonb([{k: str(r[k]) for k in ("queue", "type", "tenant_id", "status")} for r in rows])


#: How long a fold waits for the writers still in the old slot of ``job_count_deltas`` (0086).
COUNT_SLOT_LOCK_TIMEOUT = "100ms"


def _rotate_count_deltas(conn: psycopg.Connection) -> int | None:
    """Point the jobs triggers at the other partition of ``job_count_deltas`` (migration 0086) and
    lock the one they wrote until now, once its writers committed: the caller folds every delta and
    truncates the returned slot's partition in the same transaction (as the schema's owner: the
    application role has no TRUNCATE; migration 0087).  None when the lock was not granted
    within :data:`COUNT_SLOT_LOCK_TIMEOUT` (a transaction that wrote deltas is still open): that
    fold only deletes, as before 0086, and the partition is truncated at a later turn."""
    old = db.one(conn, "queue_depth_slot_advance")["slot"]
    name = f"job_count_deltas_{old}"
    timeout = conn.execute("SELECT current_setting('lock_timeout') AS t").fetchone()["t"]
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (COUNT_SLOT_LOCK_TIMEOUT,))
            conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(name)))
    except psycopg.errors.LockNotAvailable:
        old = None
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (timeout,))
    return old


def sample_depth(conn: psycopg.Connection, now: datetime | None = None, *, sweep: bool = False) -> int:
    """Bring ``queue_depth`` up to date: fold the per-statement changes the
    jobs triggers appended (migration 0044), recount the running jobs (few:
    the workers' slots) and re-read the oldest waiting job of the groups
    whose oldest job left (at most :data:`OLDEST_REFRESH_GROUPS`; with
    ``sweep``, also those an earlier fold left stale).  Costs what changed
    since the last fold, never a read of the backlog.

    One transaction (a fold cut short commits nothing); returns the number of
    groups changed.  Run by the leader's depth service every few seconds.
    """
    with conn.transaction():
        # Two leaders for a moment (a lost lock) fold one after the other.
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.depth_fold', 0))")
        emptied = _rotate_count_deltas(conn)
        folded = db.all_rows(conn, "queue_depth_fold", {"now": now})
        if emptied is not None:
            # Rows and dead versions go with the file, whatever holds the MVCC horizon.
            db.execute(conn, "queue_depth_slot_truncate", {"slot": emptied})
        empty = [r for r in folded if r["jobs"] == 0]
        if empty:
            db.execute(conn, "queue_depth_drop_empty", {"keys": _keys(empty)})
        db.execute(conn, "queue_depth_running_replace", {"now": now})
        stale = [r for r in folded if r["oldest_stale"] and r["jobs"]][:OLDEST_REFRESH_GROUPS]
        if sweep or len(stale) == OLDEST_REFRESH_GROUPS:
            stale = db.all_rows(conn, "queue_depth_stale_keys", {"limit": OLDEST_REFRESH_GROUPS})
        if stale:
            db.all_rows(conn, "queue_depth_oldest_refresh",
                        {"keys": _keys(stale), "scan": OLDEST_REFRESH_SCAN})
    return len(folded)


def depth_drift(conn: psycopg.Connection) -> list[dict]:
    """The self-check of the maintained depth: the (queue, type, tenant, status)
    groups whose full recount differs from ``queue_depth`` plus the changes not
    folded yet, both read in one statement's snapshot (empty when they agree).  Reads every
    waiting and dead job: for ``opsboard depth-check`` and the tests.  Then each tenant's
    row of ``tenant_depth`` against ``queue_depth`` summed per tenant (queue and type ``*``)."""
    drift = db.all_rows(conn, "queue_depth_recount")  # one statement: one snapshot
    return drift + db.all_rows(conn, "queue_depth_tenant_recount")


def depth_repair(conn: psycopg.Connection) -> int:
    """Rebuild the maintained depth from a full count (after :func:`depth_drift`
    found a difference).  Holds writers of ``jobs`` for the count's duration
    (SHARE lock: enqueues, claims and outcomes wait); returns the groups written."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.depth_fold', 0))")
        conn.execute("LOCK TABLE jobs IN SHARE MODE")
        conn.execute("DELETE FROM job_count_deltas")
        conn.execute("DELETE FROM queue_depth")
        # queue_depth's triggers keep tenant_depth in step from here on: start it from zero.
        conn.execute("DELETE FROM tenant_depth")
        conn.execute("DELETE FROM queue_depth_totals")
        n = db.execute(conn, "queue_depth_rebuild").rowcount
        db.execute(conn, "queue_depth_totals_rebuild")
    sample_depth(conn)
    return n


def db_now(conn: psycopg.Connection, now: datetime | None = None) -> datetime:
    return db.now(conn, now)


def queue_health(conn: psycopg.Connection, scope: TenantScope, now: datetime | None = None,
                 minutes: int = 60) -> list[QueueHealth]:
    """Per queue and per type: depth by status, oldest ready age, throughput, retry rate,
    dead count and handler time p50/p95, plus per-minute series for sparklines.

    Depth is limited to ``scope``; handler statistics are platform-wide and only
    shown to a scope that sees every tenant.
    """
    now = db_now(conn, now)
    types: dict[tuple[str, str], TypeHealth] = {}
    sampled_at = None
    # Every tenant: the fold's per-queue-and-type totals; a tenant scope: its tenants' groups.
    if scope.all:
        rows = db.all_rows(conn, "metrics_depth_totals")
    else:
        rows = db.all_rows(conn, "metrics_depth_by_queue_type", {**scope.params, "now": now})
    for r in rows:
        th = types.setdefault((r["queue"], r["type"]), TypeHealth(r["queue"], r["type"]))
        th.depth[r["status"]] = th.depth.get(r["status"], 0) + int(r["jobs"])
        if r["oldest_ready"] is not None and r["oldest_ready"] <= now \
                and (th.oldest_ready is None or r["oldest_ready"] < th.oldest_ready):
            th.oldest_ready = r["oldest_ready"]
        sampled_at = max(filter(None, [sampled_at, r["sampled_at"]]), default=None)
    if scope.all:
        hour = now - timedelta(minutes=minutes)
        five = now.replace(second=0, microsecond=0) - timedelta(minutes=5)
        recent = {(r["queue"], r["type"]): r for r in db.all_rows(conn, "metrics_stats_by_queue_type", {"since": five})}
        hourly = {(r["queue"], r["type"]): r for r in db.all_rows(conn, "metrics_stats_by_queue_type", {"since": hour})}
        hists: dict[tuple[str, str], list[int]] = {}
        for r in db.all_rows(conn, "metrics_stats_hist", {"since": hour}):
            key = (r["queue"], r["type"])
            hists[key] = add_hists(hists.get(key), r["duration_hist"])
        for key in set(hourly) | set(recent):
            th = types.setdefault(key, TypeHealth(*key))
            rec = recent.get(key)
            th.per_minute = (int(rec["succeeded"]) + int(rec["dead"])) / 5.0 if rec else 0.0
            h = hourly.get(key)
            if h:
                attempts = int(h["succeeded"]) + int(h["retried"]) + int(h["dead"])
                th.retry_rate = int(h["retried"]) / attempts if attempts else 0.0
                th.dead_last_hour = int(h["dead"])
            if key in hists:
                th.p50_ms = hist_quantile(hists[key], 0.50)
                th.p95_ms = hist_quantile(hists[key], 0.95)
    queues: dict[str, QueueHealth] = {}
    for (q, _t), th in sorted(types.items()):
        qh = queues.setdefault(q, QueueHealth(q, target_seconds=queue_age_target(q), sampled_at=sampled_at))
        if th.oldest_ready is not None:
            th.oldest_age_seconds = max(0.0, (now - th.oldest_ready).total_seconds())
            th.over_target = th.oldest_age_seconds > qh.target_seconds
        qh.types.append(th)
        for s, n in th.depth.items():
            qh.depth[s] = qh.depth.get(s, 0) + n
        if th.oldest_age_seconds is not None:
            qh.oldest_age_seconds = max(qh.oldest_age_seconds or 0.0, th.oldest_age_seconds)
        if th.per_minute is not None:
            qh.per_minute = (qh.per_minute or 0.0) + th.per_minute
        if th.dead_last_hour is not None:
            qh.dead_last_hour = (qh.dead_last_hour or 0) + th.dead_last_hour
    for qh in queues.values():
        qh.over_target = qh.oldest_age_seconds is not None and qh.oldest_age_seconds > qh.target_seconds
        rates = [(t.retry_rate, t) for t in qh.types if t.retry_rate is not None]
        if rates:
            qh.retry_rate = max(r for r, _ in rates)
    if scope.all:
        series = throughput_series(conn, now, minutes)
        for q, (ok, failed) in series.items():
            qh = queues.setdefault(q, QueueHealth(q, target_seconds=queue_age_target(q)))
            qh.series_ok, qh.series_failed = ok, failed
    for q in QUEUE_NAMES:  # every queue shows, busy or not
        queues.setdefault(q, QueueHealth(q, target_seconds=queue_age_target(q), sampled_at=sampled_at))
    order = {name: i for i, name in enumerate(QUEUE_NAMES)}
    return sorted(queues.values(), key=lambda qh: (order.get(qh.queue, 9), qh.queue))


def throughput_series(conn: psycopg.Connection, now: datetime, minutes: int = 60) -> dict[str, tuple[list[int], list[int]]]:
    """Per queue: completions and failures per minute over the last ``minutes`` (oldest first)."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    out: dict[str, tuple[list[int], list[int]]] = {}
    for r in db.all_rows(conn, "metrics_stats_series", {"since": start}):
        ok, failed = out.setdefault(r["queue"], ([0] * minutes, [0] * minutes))
        i = int((r["minute"] - start).total_seconds() // 60)
        if 0 <= i < minutes:
            ok[i] += int(r["succeeded"])
            failed[i] += int(r["failed"])
    return out


@dataclass
class TenantBacklog:
    tenant_id: object
    slug: str
    name: str
    weight: int
    depth: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    oldest_age_seconds: float | None = None
    running_share: float = 0.0


def tenant_backlog(conn: psycopg.Connection, scope: TenantScope, now: datetime | None = None,
                   tenant_id=None) -> list[TenantBacklog]:
    """Per tenant: pending, running, retryable, dead, oldest ready age and share of running slots,
    counted live from ``jobs`` (a tenant's detail page passes its ``tenant_id``).  A list of many
    tenants reads :func:`tenant_backlog_page` instead: the maintained counts, one page at a time
    (counting every tenant of the scale bench live is too slow for a page)."""
    now = db_now(conn, now)
    tenants: dict = {}
    for r in db.all_rows(conn, "metrics_depth_by_tenant", {**scope.params, "tenant_id": tenant_id, "now": now}):
        tb = tenants.setdefault(r["tenant_id"], TenantBacklog(r["tenant_id"], r["slug"], r["name"], r["weight"]))
        tb.depth[r["status"]] = tb.depth.get(r["status"], 0) + int(r["jobs"])
        if r["oldest_ready"] is not None:
            age = max(0.0, (now - r["oldest_ready"]).total_seconds())
            tb.oldest_age_seconds = max(tb.oldest_age_seconds or 0.0, age)
    # Shares among the tenants in scope only: a tenant's staff learn nothing of the others.
    running = [r for r in db.all_rows(conn, "metrics_running_by_tenant") if scope.allows(r["tenant_id"])]
    total = sum(int(r["running"]) for r in running) or 0
    live: dict = {}
    for r in running:
        live[r["tenant_id"]] = live.get(r["tenant_id"], 0) + int(r["running"])
    for tid, n in live.items():
        if tid in tenants:
            tenants[tid].depth["running"] = n
            tenants[tid].running_share = n / total if total else 0.0
    return sorted(tenants.values(), key=lambda t: (-(t.depth["pending"] + t.depth["retryable"]), t.name))


#: Tenants on one page of the tenants page.
TENANT_PAGE = 100


@dataclass
class TenantPage:
    rows: list[TenantBacklog]
    #: Tenants in scope with any job waiting, running or dead.
    total: int
    #: The cursor of the next page (waiting jobs, tenant id of the last row), or None on the last page.
    next_after: tuple[int, uuid.UUID] | None


def tenant_backlog_page(conn: psycopg.Connection, scope: TenantScope, *, after: tuple[int, uuid.UUID] | None = None,
                        limit: int | None = None, now: datetime | None = None) -> TenantPage:
    """One page of tenants by waiting jobs, most first (keyset ``after``: the previous page's
    ``next_after``), with :func:`tenant_backlog`'s figures: read from ``tenant_depth``, kept by
    triggers on ``queue_depth`` (migration 0049), so that a page costs the same at any number of
    tenants; running jobs and shares counted live as :func:`tenant_backlog` does."""
    now = db_now(conn, now)
    limit = limit or TENANT_PAGE
    found = conn.execute(db.queries["metrics_tenant_page"], {
        **scope.params, "after_waiting": after[0] if after else None, "after_id": after[1] if after else None,
        "limit": limit + 1}, prepare=False).fetchall()
    more = len(found) > limit
    found = found[:limit]
    rows = []
    for r in found:
        tb = TenantBacklog(r["tenant_id"], r["slug"], r["name"], r["weight"])
        tb.depth.update(pending=int(r["pending"]), retryable=int(r["retryable"]), dead=int(r["dead"]), running=0)
        rows.append(tb)
    if rows:
        oldest = {r["tenant_id"]: r["oldest_ready"] for r in db.all_rows(
            conn, "metrics_oldest_ready_by_tenant", {"ids": [t.tenant_id for t in rows], "now": now})}
        for tb in rows:
            if oldest.get(tb.tenant_id) is not None:
                tb.oldest_age_seconds = max(0.0, (now - oldest[tb.tenant_id]).total_seconds())
    # Shares among the tenants in scope only: a tenant's staff learn nothing of the others.
    running = [r for r in db.all_rows(conn, "metrics_running_by_tenant") if scope.allows(r["tenant_id"])]
    total_running = sum(int(r["running"]) for r in running)
    by_id = {tb.tenant_id: tb for tb in rows}
    for r in running:
        if r["tenant_id"] in by_id:
            by_id[r["tenant_id"]].depth["running"] += int(r["running"])
    for tb in rows:
        tb.running_share = tb.depth["running"] / total_running if total_running else 0.0
    total = int(db.one(conn, "metrics_tenant_page_count", scope.params)["n"])
    last = found[-1] if found else None
    return TenantPage(rows, total, (int(last["waiting"]), last["tenant_id"]) if more and last else None)


def tenant_detail(conn: psycopg.Connection, scope: TenantScope, tenant_id, now: datetime | None = None) -> dict | None:
    """One tenant inside ``scope``: its row, backlog summary and depth per queue, type and status."""
    if not scope.allows(tenant_id):
        return None
    tenant = db.one(conn, "tenant_get_visible", {**scope.params, "id": tenant_id})
    if tenant is None:
        return None
    summary = tenant_backlog(conn, scope, now, tenant_id=tenant_id)
    parts = db.all_rows(conn, "metrics_depth_by_tenant_queue_type",
                        {**scope.params, "tenant_id": tenant_id, "now": db_now(conn, now)})
    return {"tenant": tenant, "summary": summary[0] if summary else None, "parts": parts}


#: The outcomes counted by ``opsboard_jobs_completed``.
OUTCOMES = ("succeeded", "retried", "dead", "snoozed")


def completed_totals(conn: psycopg.Connection) -> list[dict]:
    """Lifetime outcome counts per queue and type (``succeeded``, ``retried``, ``dead``,
    ``snoozed``): never lower than at an earlier call, whatever the pruner deleted."""
    return db.all_rows(conn, "metrics_stats_totals")


def workers(conn: psycopg.Connection, now: datetime | None = None) -> list[dict]:
    """Registered worker processes with the seconds since their last heartbeat."""
    return db.all_rows(conn, "metrics_workers_live", {"now": now})


# ---------------------------------------------------------------- Prometheus

def outbox_backlog(conn: psycopg.Connection, scope: TenantScope, now: datetime | None = None) -> dict:
    """The relay's backlog in ``scope``: ``waiting`` unrelayed events, ``oldest_seconds``
    (the relay's lag; ``None`` when nothing waits) and ``parked_24h`` events parked as unroutable."""
    row = db.one(conn, "outbox_backlog", {"now": now, **scope.params})
    return {"waiting": int(row["waiting"]), "parked_24h": int(row["parked_24h"]),
            "oldest_seconds": None if row["oldest_seconds"] is None else max(0.0, float(row["oldest_seconds"]))}


def event_export_lag(conn: psycopg.Connection, now: datetime | None = None) -> list[dict]:
    """The export to NATS JetStream (opsboard/outbox/export.py), one row per stream an exporter ever
    wrote to (none: no export configured): ``stream``, ``server``, ``connected``, ``last_error``,
    ``exported``, ``duplicates``, ``heartbeat_at``, ``lag_events`` (events not yet exported) and
    ``lag_seconds`` (the oldest one's age, 0 when none waits).  Platform-wide: operator staff only."""
    rows = db.all_rows(conn, "event_export_lag", {"now": now})
    for r in rows:
        r["lag_events"] = int(r["lag_events"])
        r["lag_seconds"] = max(0.0, float(r["lag_seconds"]))
    return rows


class QueueCollector:
    """A prometheus-client collector reading the queue's tables at scrape time."""

    def __init__(self, database):
        self.database = database

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        depth = GaugeMetricFamily("opsboard_jobs", "Jobs by queue, type and status (sampled)",
                                  labels=["queue", "type", "status"])
        oldest = GaugeMetricFamily("opsboard_queue_oldest_ready_seconds", "Age of the oldest ready job",
                                   labels=["queue"])
        completed = CounterMetricFamily("opsboard_jobs_completed", "Job attempts by outcome since the start",
                                        labels=["queue", "type", "outcome"])
        p95 = GaugeMetricFamily("opsboard_handler_seconds_p95", "Handler time p95 over the last hour",
                                labels=["queue", "type"])
        live = GaugeMetricFamily("opsboard_workers", f"Worker processes seen in the last {WORKER_LIVE_SECONDS} s",
                                 labels=["state"])
        abandoned = GaugeMetricFamily("opsboard_worker_abandoned_threads",
                                      "Handler threads still running past their timeout", labels=["worker", "queue"])
        service_errors = CounterMetricFamily("opsboard_service_errors", "Maintenance service failures",
                                             labels=["service"])
        unrelayed = GaugeMetricFamily("opsboard_outbox_unrelayed", "Outbox events waiting for a relay")
        lag = GaugeMetricFamily("opsboard_outbox_oldest_unrelayed_seconds",
                                "Age of the oldest unrelayed outbox event (the relay's lag; 0 when none waits)")
        parked = GaugeMetricFamily("opsboard_outbox_parked_24h",
                                   "Outbox events parked as unroutable (relayed without jobs) in the last 24 h")
        paused = GaugeMetricFamily("opsboard_paused", "Held by an operator (issue 28): 1 per paused queue, type, "
                                   "tenant or provider", labels=["kind", "target"])
        export_events = GaugeMetricFamily("opsboard_event_export_lag_events",
                                          "Outbox events not yet exported to the NATS JetStream stream", labels=["stream"])
        export_seconds = GaugeMetricFamily("opsboard_event_export_lag_seconds",
                                           "Age of the oldest outbox event not yet exported (0 when none waits)",
                                           labels=["stream"])
        with self.database.connection() as conn:
            scope = TenantScope(all=True)
            # Read only (a scrape writes nothing): holds past their resume time are left out.
            for r in db.all_rows(conn, "pause_list", {"now": None}):
                paused.add_metric([r["kind"], r["target"]], 1)
            backlog = outbox_backlog(conn, scope)
            unrelayed.add_metric([], backlog["waiting"])
            lag.add_metric([], backlog["oldest_seconds"] or 0.0)
            parked.add_metric([], backlog["parked_24h"])
            # Only streams an exporter ever wrote to (opsboard/outbox/export.py; none: no gauges).
            for r in event_export_lag(conn):
                export_events.add_metric([r["stream"]], r["lag_events"])
                export_seconds.add_metric([r["stream"]], r["lag_seconds"])
            for qh in queue_health(conn, scope):
                for th in qh.types:
                    for status, n in th.depth.items():
                        depth.add_metric([th.queue, th.type, status], n)
                    if th.p95_ms is not None and th.p95_ms != float("inf"):
                        p95.add_metric([th.queue, th.type], th.p95_ms / 1000.0)
                oldest.add_metric([qh.queue], qh.oldest_age_seconds or 0.0)
            for r in completed_totals(conn):
                for outcome in OUTCOMES:
                    completed.add_metric([r["queue"], r["type"], outcome], float(r[outcome]))
            counts: dict[str, int] = {"running": 0, "stopping": 0}
            for w in workers(conn):
                if float(w["silent_seconds"]) <= WORKER_LIVE_SECONDS:
                    counts[w["state"]] = counts.get(w["state"], 0) + 1
                    for q, n in (w["abandoned_threads"] or {}).items():
                        abandoned.add_metric([w["id"], q], n)
            for state, n in counts.items():
                live.add_metric([state], n)
            for r in db.all_rows(conn, "service_error_totals"):
                service_errors.add_metric([r["service"]], float(r["errors"]))
        yield from (depth, oldest, completed, p95, live, abandoned, service_errors, unrelayed, lag, parked, paused,
                      export_events, export_seconds)


def prometheus_text(database) -> bytes:
    """The exposition document for ``/metrics`` (the operator's scraper: every tenant's figures)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from . import tenancy
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(database))
    with tenancy.bypass(tenancy.Bypass.OPERATOR):  # the platform's figures: every tenant's rows
        return generate_latest(registry)


# ---------------------------------------------------------------- time-series charts

#: A tenant's chart ranges: name -> (minutes covered, minutes per bucket).  A tenant's chart reads its
#: attempts (job_stats carry no tenant), so it stops at 24 hours.
CHART_RANGES = {"1h": (60, 1), "24h": (1440, 15)}
#: The queue and job type charts' ranges: the hour from job_stats' minutes, 24 hours and 7 days from the
#: history rollup (opsboard.history, migration 0094).
HISTORY_RANGES = {"1h": (60, 1), "24h": (1440, 15), "7d": (10080, 60)}
_ORIGIN = datetime(2000, 1, 1, tzinfo=timezone.utc)


def hist_estimate(hist: list[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) in ms of a handler-time histogram, interpolated
    linearly inside its bucket (as Prometheus' ``histogram_quantile``): where the
    rank falls between the bucket's bounds, not its upper bound, so that a chart
    of it is not a staircase of bucket bounds.  The overflow bucket answers the
    last bound.  None without data."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        if count and seen + count >= rank:
            if i >= len(DURATION_BUCKETS_MS):
                return float(DURATION_BUCKETS_MS[-1])
            lower = float(DURATION_BUCKETS_MS[i - 1]) if i else 0.0
            return lower + (DURATION_BUCKETS_MS[i] - lower) * (rank - seen) / count
        seen += count
    return float(DURATION_BUCKETS_MS[-1])


@dataclass
class ChartData:
    """Per-bucket series for one chart: rates per minute, p95 in ms and waiting
    jobs (``None``: no data)."""

    key: str
    buckets: list[datetime]
    processed: list[float]
    failed: list[float]
    p95: list[float | None]
    waiting: list[float | None] = field(default_factory=list)


def _buckets(now: datetime, range_name: str, ranges: dict = CHART_RANGES) -> tuple[list[datetime], int, datetime]:
    minutes, step = ranges[range_name]
    n = minutes // step
    seconds = step * 60
    last = _ORIGIN + timedelta(seconds=((now - _ORIGIN).total_seconds() // seconds) * seconds)
    first = last - timedelta(minutes=step * (n - 1))
    return [first + timedelta(minutes=step * i) for i in range(n)], step, first


def throughput_charts(conn: psycopg.Connection, range_name: str = "1h", now: datetime | None = None, *,
                      queue: str | None = None, job_type: str | None = None,
                      ) -> tuple[dict[str, ChartData], dict[tuple[str, str], ChartData]]:
    """Per queue and per (queue, type): processed and failed attempts per minute,
    p95 handler time and waiting jobs, per bucket, over ``range_name`` (``1h``: 60
    one-minute buckets from job_stats; ``24h``: 96 of 15 minutes and ``7d``: 168
    of an hour, from the history rollup), optionally of one ``queue`` and one
    ``job_type`` of it.  Platform-wide (job statistics carry no tenant): for
    operator staff only."""
    if range_name not in HISTORY_RANGES:
        raise ValueError(f"range must be one of {', '.join(HISTORY_RANGES)}")
    buckets, step, first = _buckets(db_now(conn, now), range_name, HISTORY_RANGES)
    index = {b: i for i, b in enumerate(buckets)}
    n = len(buckets)
    params = {"bucket_minutes": step, "origin": _ORIGIN, "since": first, "queue": queue, "type": job_type}

    def blank(key: str) -> ChartData:
        return ChartData(key, buckets, [0.0] * n, [0.0] * n, [None] * n, [None] * n)

    def wanted(r) -> bool:
        return (queue is None or r["queue"] == queue) and (job_type is None or r["type"] == job_type)

    queues: dict[str, ChartData] = {}
    types: dict[tuple[str, str], ChartData] = {}

    def charts_of(r) -> tuple[ChartData, ChartData]:
        q, key = r["queue"], (r["queue"], r["type"])
        queue_chart = queues.get(q) or queues.setdefault(q, blank(q))
        type_chart = types.get(key) or types.setdefault(key, blank(f"{q} · {r['type']}"))
        return queue_chart, type_chart

    type_hists: dict[tuple[str, str, int], list[int]] = {}
    depth: list[tuple[str, str, int, int]] = []

    def add_hist(key: tuple[str, str, int], hist) -> None:
        # In place: a week's chart sums 672 rows per type (add_hists copies at every step).
        into = type_hists.get(key)
        if into is None:
            type_hists[key] = [int(v) for v in hist]
        else:
            if len(hist) > len(into):
                into.extend([0] * (len(hist) - len(into)))
            for j, v in enumerate(hist):
                into[j] += v
    if range_name == "1h":
        for r in db.all_rows(conn, "metrics_chart_counts", params):
            i = index.get(r["bucket"])
            if i is None or not wanted(r):
                continue
            for chart in charts_of(r):
                chart.processed[i] += int(r["processed"]) / step
                chart.failed[i] += int(r["failed"]) / step
        for r in db.all_rows(conn, "metrics_chart_hist", params):
            i = index.get(r["bucket"])
            if i is not None and wanted(r) and any(r["hist"]):
                add_hist((r["queue"], r["type"], i), [v or 0 for v in r["hist"]])
        for r in db.all_rows(conn, "metrics_history_depth_minutes", params):
            i = index.get(r["bucket"])
            if i is not None:
                depth.append((r["queue"], r["type"], i, int(r["waiting"])))
    else:
        for r in db.all_rows(conn, "metrics_history_window", params):
            i = index.get(r["bucket"])
            if i is None:
                continue
            if r["processed"]:
                for chart in charts_of(r):
                    chart.processed[i] += int(r["processed"]) / step
                    chart.failed[i] += int(r["failed"]) / step
            if any(r["hist"]):
                add_hist((r["queue"], r["type"], i), [v or 0 for v in r["hist"]])
            if r["waiting"] is not None:
                depth.append((r["queue"], r["type"], i, int(r["waiting"])))
    queue_hists: dict[tuple[str, int], list[int]] = {}
    for (q, t, i), hist in type_hists.items():
        types.setdefault((q, t), blank(f"{q} · {t}")).p95[i] = hist_estimate(hist, 0.95)
        queue_hists[(q, i)] = add_hists(queue_hists.get((q, i)), hist)
    for (q, i), hist in queue_hists.items():
        queues.setdefault(q, blank(q)).p95[i] = hist_estimate(hist, 0.95)
    # Waiting jobs: the peak a bucket's samples saw (a type's; a queue's, its types' summed).  A type
    # missing from a sampled bucket had none waiting; a bucket without any sample stays a gap.
    sampled = {i for _q, _t, i, _w in depth}
    for q, t, i, w in depth:
        if w or (q, t) in types:
            queue_chart, type_chart = charts_of({"queue": q, "type": t})
            type_chart.waiting[i] = (type_chart.waiting[i] or 0) + w
            queue_chart.waiting[i] = (queue_chart.waiting[i] or 0) + w
    for chart in list(queues.values()) + list(types.values()):
        for i in sampled:
            if chart.waiting[i] is None:
                chart.waiting[i] = 0.0
    return queues, types


def tenant_chart(conn: psycopg.Connection, tenant_id, range_name: str = "1h",
                 now: datetime | None = None) -> ChartData:
    """One tenant's processed and failed attempts per minute and p95 handler time, per bucket."""
    if range_name not in CHART_RANGES:
        raise ValueError(f"range must be one of {', '.join(CHART_RANGES)}")
    buckets, step, first = _buckets(db_now(conn, now), range_name)
    index = {b: i for i, b in enumerate(buckets)}
    n = len(buckets)
    chart = ChartData("tenant", buckets, [0.0] * n, [0.0] * n, [None] * n)
    # Attempts carry their tenant since 0050; a window that still holds older ones is read
    # through their jobs (exact either way; the other way round each such attempt is a probe).
    legacy = db.one(conn, "metrics_attempts_without_tenant", {"since": first})["found"]
    name = "metrics_tenant_chart_joined" if legacy else "metrics_tenant_chart"
    for r in db.all_rows(conn, name, {"bucket_minutes": step, "origin": _ORIGIN, "since": first,
                                      "tenant_id": tenant_id}):
        i = index.get(r["bucket"])
        if i is None:
            continue
        chart.processed[i] = int(r["processed"]) / step
        chart.failed[i] = int(r["failed"]) / step
        chart.p95[i] = float(r["p95"]) if r["p95"] is not None else None
    return chart


def tenant_recent_failures(conn: psycopg.Connection, tenant_id, *, hours: int = 24, limit: int = 10,
                           now: datetime | None = None) -> list[dict]:
    """A tenant's latest failed attempts (within ``hours``)."""
    since = db_now(conn, now) - timedelta(hours=hours)
    return db.all_rows(conn, "metrics_tenant_recent_failures", {"tenant_id": tenant_id, "since": since, "limit": limit})
