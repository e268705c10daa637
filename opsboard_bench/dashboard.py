"""The ``dashboard`` scenario: the server time of each dashboard page at 1,000,000 jobs."""
from __future__ import annotations

import time

from opsboard import auth

from .harness import Bench, median_get_ms, web_login

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


def dashboard(b: Bench) -> None:
    """1,000,000 jobs (90% succeeded, 6% pending, 2% retryable, 2% dead): server time of each page."""
    total = b.jobs or 1_000_000
    tenants = b.tenants(100)
    with b.conn() as c:
        t0 = time.perf_counter()
        c.execute(_FILL_SQL, {"total": total, "tenants": tenants, "n_tenants": len(tenants)})
        c.execute("INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, "
                  "detail) SELECT id, 1, 'bench', created_at, created_at, 'dead', last_error_code, "
                  "'receiver answered 410 Gone' FROM jobs WHERE status = 'dead'")
        c.execute("VACUUM ANALYZE jobs")
        c.execute("VACUUM ANALYZE job_attempts")
        fill = time.perf_counter() - t0
        from opsboard import metrics
        metrics.sample_depth(c)
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "bench@opsboard.local", "bench-password", "ops", "operator")
        dead_id = c.execute("SELECT id FROM jobs WHERE status = 'dead' ORDER BY id DESC LIMIT 1").fetchone()["id"]
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
                 ("audit", "/audit/_rows")]
        for label, path in pages:
            shown = path.split("?")[0].replace(str(dead_id), "<id>")
            b.add("dashboard", f"{label} ({shown})", median_get_ms(client, path), "ms",
                  f"median of 5 at {total:,} jobs")
    finally:
        database.close()
    print(f"  (filled {total:,} jobs in {fill:.0f} s)")
    b.reset()

