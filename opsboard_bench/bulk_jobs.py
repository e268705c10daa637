"""Millions of jobs by SQL for the ``depth`` and ``prune`` scenarios."""
from __future__ import annotations

import uuid

from .harness import Bench

#: Jobs for the depth and prune scenarios, by SQL (COPY-speed, no Python per row):
#: %(pending)s waiting jobs spread over the tenants, then %(finished)s succeeded
#: ones, created and finished %(age)s seconds ago, each with one attempt row
#: when %(attempts)s.
BULK_SQL = """
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, status, attempts, max_attempts,
                  available_at, created_at, started_at, finished_at)
SELECT (lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text || 'x'), 1, 15))::uuid,
       (ARRAY['demo.send_email', 'demo.deliver_webhook', 'diag.noop', 'diag.sleep'])[1 + g %% 4], 1,
       (%(tenants)s::uuid[])[1 + (g / 4) %% %(n_tenants)s], 'default', 100, '{}'::jsonb,
       st::job_status, CASE WHEN st = 'pending' THEN 0 ELSE 1 END, 5, ts, ts,
       CASE WHEN st <> 'pending' THEN ts END, CASE WHEN st <> 'pending' THEN ts END
FROM (SELECT g, now() - make_interval(secs => %(age)s + (%(total)s - g) * 0.001) AS ts,
             CASE WHEN g <= %(pending)s THEN 'pending' ELSE 'succeeded' END AS st
      FROM generate_series(%(first)s, %(last)s) g) s
"""


def bulk_tenants(b: Bench, n: int) -> list[uuid.UUID]:
    with b.conn() as c:
        c.execute("INSERT INTO tenants (id, slug, name) SELECT gen_random_uuid(), 'bulk-' || g, 'Bulk ' || g "
                  "FROM generate_series(1, %s) g ON CONFLICT (slug) DO NOTHING", (n,))
        return [r["id"] for r in c.execute("SELECT id FROM tenants WHERE slug LIKE 'bulk-%%' ORDER BY id")]

