"""Seeding job rows for report tests and the memory measurement (plain SQL, fast)."""
from __future__ import annotations

import csv
import io

from opsboard.reports import BOM

#: A UUIDv7 for the row's created_at (ms in the first 48 bits), random elsewhere.
_UUID7 = ("(lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7' "
          "|| substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid")

STATUSES = ("pending", "succeeded", "retryable", "dead", "cancelled")


def seed_jobs(conn, tenant_id, start, *, days: int, types: list[str], per_day: int, step_seconds: int = 37) -> int:
    """``per_day`` jobs a day for ``days`` days from ``start``, cycling through ``types`` and statuses."""
    cur = conn.execute(f"""
        INSERT INTO jobs (id, type, tenant_id, queue, payload, status, max_attempts, created_at)
        SELECT {_UUID7}, (%(types)s::text[])[1 + (g %% cardinality(%(types)s::text[]))], %(tenant)s, 'default', '{{}}',
               (%(statuses)s::text[])[1 + ((g / 7) %% cardinality(%(statuses)s::text[]))]::job_status, 3, ts
        FROM generate_series(0, %(n)s - 1) AS g,
             LATERAL (SELECT %(start)s::timestamptz + (g / %(per_day)s) * interval '1 day'
                             + ((g %% %(per_day)s) * %(step)s %% 86400) * interval '1 second' AS ts) t
        """, {"types": types, "tenant": tenant_id, "statuses": list(STATUSES), "n": days * per_day,
              "start": start, "per_day": per_day, "step": step_seconds})
    return cur.rowcount


def direct_csv(conn, tenant_id, date_from: str, date_to: str, time_zone: str) -> bytes:
    """The job activity report as one direct SQL query, written as the report writes it."""
    rows = conn.execute("""
        SELECT (created_at AT TIME ZONE %(tz)s)::date AS day, type, status, count(*)
        FROM jobs
        WHERE tenant_id = %(tenant)s
          AND created_at >= (%(d_from)s::date)::timestamp AT TIME ZONE %(tz)s
          AND created_at < ((%(d_to)s::date + 1)::timestamp AT TIME ZONE %(tz)s)
        GROUP BY 1, 2, status ORDER BY 1, 2, status""",
                        {"tz": time_zone, "tenant": tenant_id, "d_from": date_from, "d_to": date_to}).fetchall()
    out = io.StringIO(newline="")
    w = csv.writer(out)
    w.writerow(("day", "job_type", "status", "jobs"))
    for r in rows:
        r = list(r.values()) if isinstance(r, dict) else list(r)
        w.writerow((r[0].isoformat(), r[1], r[2], r[3]))
    return BOM + out.getvalue().encode("utf-8")
