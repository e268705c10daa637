"""The ``dashboard`` scenario: the server time of each dashboard page at 1,000,000 jobs (``--jobs N``, up to
10,000,000), with a week of handler statistics and their history rollup.

The seed is set-based (one ``INSERT ... SELECT generate_series`` for the jobs, one for their dead
attempts, one for the per-minute ``job_stats`` of 7 days x 2 workers x 4 types), then the history
rollup is built from those statistics by the product's own code (:func:`opsboard.history.roll_up`,
as the leader's history service does it every minute) for the whole week.  Each page is fetched
through the real views (Flask test client) ``PAGE_RUNS`` times after one warm-up; its p50 and p95 are
printed and go into ``--json``.
"""
from __future__ import annotations

import statistics
import time

from opsboard import auth

from .harness import Bench, web_login

#: Timed fetches of each page (after one warm-up fetch).
PAGE_RUNS = 20

_FILL_SQL = """
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, status, attempts, max_attempts,
                  available_at, last_error_code, created_at, started_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text || 'x'), 1, 15))::uuid,
       (ARRAY['demo.send_email', 'demo.deliver_webhook', 'diag.noop', 'diag.sleep'])[1 + g %% 4], 1,
       (%(tenants)s::uuid[])[1 + g %% %(n_tenants)s], 'default', 100, jsonb_build_object('n', g),
       st::job_status, CASE WHEN st = 'pending' THEN 0 ELSE 1 END, 5, ts,
       CASE st WHEN 'dead' THEN (ARRAY['http_410', 'smtp_550', 'timeout'])[1 + g %% 3]
               WHEN 'retryable' THEN 'http_503' END,
       ts, CASE WHEN st <> 'pending' THEN ts END, CASE WHEN st IN ('succeeded', 'dead') THEN ts END
FROM (SELECT g, now() - make_interval(secs => (%(total)s - g) * 0.5) AS ts,
             CASE WHEN g %% 100 < 90 THEN 'succeeded' WHEN g %% 100 < 96 THEN 'pending'
                  WHEN g %% 100 < 98 THEN 'retryable' ELSE 'dead' END AS st
      FROM generate_series(1, %(total)s) g) s
"""

#: A week of per-minute handler statistics, as two workers flushing four types would leave them: counts
#: that follow the time of day, handler times around 10-50 ms with a slow hour every day (so the p95
#: line has a shape).  Histograms have one cell per DURATION_BUCKETS_MS bound plus the overflow.
_STATS_SQL = """
INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, snoozed, duration_ms_sum,
                       duration_hist)
SELECT m, w, 'default', t, ok, ok / 20, ok / 50, 0, ok * 20,
       ARRAY[0, 0, ok / 10, ok / 5, ok / 3, ok / 5 + slow, ok / 10, slow, slow / 2, 0, 0, 0, 0, 0, 0, 0]
FROM generate_series(date_trunc('minute', now()) - interval '7 days', date_trunc('minute', now()),
                     interval '1 minute') m
CROSS JOIN (VALUES ('bench-1'), ('bench-2')) AS ws(w)
CROSS JOIN unnest(ARRAY['demo.send_email', 'demo.deliver_webhook', 'diag.noop', 'diag.sleep']) AS ts(t)
CROSS JOIN LATERAL (SELECT (40 + 30 * sin(extract(epoch FROM m) / 13751))::int AS ok,
                           CASE WHEN extract(hour FROM m) = 14 THEN 12 ELSE 1 END AS slow) x
"""


def _page_times(client, path: str, runs: int = PAGE_RUNS) -> list[float]:
    """Server times (ms) of ``runs`` GETs of ``path`` after one warm-up; anything but 200 is an error."""
    times = []
    for i in range(runs + 1):
        t1 = time.perf_counter()
        r = client.get(path)
        if i:
            times.append((time.perf_counter() - t1) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"{path} answered {r.status_code}")
    return times


def dashboard(b: Bench) -> None:
    """1,000,000 jobs (--jobs N, up to 10,000,000; 90% succeeded, 6% pending, 2% retryable, 2% dead) and a
    week of statistics: p50 and p95 server time of each page, history charts over 1 h, 24 h and 7 d."""
    total = b.jobs or 1_000_000
    tenants = b.tenants(100)
    with b.conn() as c:
        t0 = time.perf_counter()
        c.execute(_FILL_SQL, {"total": total, "tenants": tenants, "n_tenants": len(tenants)})
        c.execute("INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, "
                  "detail) SELECT id, 1, 'bench', created_at, created_at, 'dead', last_error_code, "
                  "'receiver answered 410 Gone' FROM jobs WHERE status = 'dead'")
        fill = time.perf_counter() - t0
        t0 = time.perf_counter()
        c.execute(_STATS_SQL)
        stats = c.execute("SELECT count(*) AS n FROM job_stats").fetchone()["n"]
        from opsboard import metrics
        metrics.sample_depth(c)
        try:  # the history rollup (issue 44): absent before it, when this measures the "before"
            from opsboard import history
        except ImportError:
            history = None
        if history is not None:
            history.roll_up(c, since_days=7)
        rolled = time.perf_counter() - t0
        for table in ("jobs", "job_attempts", "job_stats"):
            c.execute(f"VACUUM ANALYZE {table}")
        if history is not None:
            c.execute("VACUUM ANALYZE job_history")
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "bench@opsboard.local", "bench-password", "ops", "operator")
        dead_id = c.execute("SELECT id FROM jobs WHERE status = 'dead' ORDER BY id DESC LIMIT 1").fetchone()["id"]
    print(f"  (filled {total:,} jobs in {fill:.0f} s; {stats:,} rows of job_stats and their rollup in {rolled:.0f} s)",
          flush=True)
    from opsboard.web.app import create_app  # the dashboard scenario times the real web views
    from opsboard.db import Database
    database = Database(b.url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": b.config.replace(database_url=b.url, mode="test",
                                                       secret_key="bench-" + "x" * 32),
                          "DATABASE": database})
        client = web_login(app, "bench@opsboard.local")
        pages = [("queue health", "/queues/_health"), ("tenants", "/tenants/_backlog"),
                 ("job list, newest", "/jobs/_rows"), ("job list, status=dead", "/jobs/_rows?status=dead"),
                 ("job list, one tenant", f"/jobs/_rows?tenant={tenants[7]}"),
                 ("job list, type + status", "/jobs/_rows?type=diag.noop&status=pending"),
                 ("job list, search", "/jobs/_rows?q=http_410"),
                 ("dead letters", "/dead/_groups"), ("job detail", f"/jobs/{dead_id}"),
                 ("audit", "/audit/_rows"),
                 ("queue page with charts, 1 h", "/queues/?range=1h")]
        from opsboard import metrics
        ranges = getattr(metrics, "HISTORY_RANGES", metrics.CHART_RANGES)  # 7 d since issue 44's history
        for r in ("24h", "7d"):
            if r in ranges:
                pages.append((f"queue page with charts, {r[:-1]} {r[-1]}", f"/queues/?range={r}"))
                pages.append((f"charts (htmx), {r[:-1]} {r[-1]}", f"/queues/_charts?range={r}"))
        if "queues.type_page" in app.view_functions:
            for r in ("1h", "24h", "7d"):
                pages.append((f"job type page, {r[:-1]} {r[-1]}", f"/queues/default/types/diag.noop?range={r}"))
        for label, path in pages:
            shown = path.replace(str(dead_id), "<id>").replace(str(tenants[7]), "<tenant>")
            times = sorted(_page_times(client, path))
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            note = f"{len(times)} GETs at {total:,} jobs"
            b.add("dashboard", f"{label} ({shown}) p50", statistics.median(times), "ms", note)
            b.add("dashboard", f"{label} ({shown}) p95", p95, "ms", note)
    finally:
        database.close()
    b.reset()
