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


# ------------------------------------------------------------ a run driven as the worker drives it

WORKER = "report-test-worker"


def claim_jobs(conn, run_id, job_type: str, expected: int | None = None) -> list[dict]:
    """Claim the run's jobs of ``job_type`` through the queue's own claim (queue ``bulk``), as a worker
    does; other jobs the claims take stay running (the test's transaction ends them)."""
    from opsboard import jobqueue
    got: list[dict] = []
    for _ in range(50):
        rows = jobqueue.claim(conn, "bulk", WORKER, 1000, 600).rows
        got += [r for r in rows if r["type"] == job_type and r["payload"].get("run_id") == str(run_id)]
        if not rows or (expected is not None and len(got) >= expected):
            break
    return got


def complete(conn, job: dict, result) -> set:
    """Record one claimed job's success with its result through the completer's statement: the
    transaction that releases its workflow's dependents (the assembly after the last chunk)."""
    import json
    from datetime import datetime, timezone
    from opsboard import jobqueue
    from opsboard.jobqueue import workflows
    return jobqueue.record_outcomes(conn, WORKER, [jobqueue.OutcomeRecord(
        job["id"], job["attempts"], "succeeded", job.get("started_at") or datetime.now(timezone.utc),
        result=None if result is None else json.dumps(result),
        task=workflows.task_id_of(job["idempotency_key"]))])


def run_chunks(conn, store, run_id, *, order=None) -> list[dict]:
    """Claim, write and complete every chunk of a planned run (in ``order`` of their seq)."""
    from opsboard import reports
    jobs = sorted(claim_jobs(conn, run_id, "reports.chunk", reports.get_run(
        conn, run_id, _all())["total_chunks"]), key=lambda j: j["payload"]["seq"])
    for job in (order(jobs) if order else jobs):
        p = job["payload"]
        complete(conn, job, reports.run_chunk(conn, store, run_id, p["seq"], p["lower"], p.get("upper")))
    return jobs


def assemble(conn, store, run_id) -> dict:
    """Claim the run's assembly (released by its workflow once every chunk succeeded), write the file
    from its dependencies' results, and complete it; returns the run."""
    from opsboard import reports
    from opsboard.jobqueue import workflows
    [job] = claim_jobs(conn, run_id, "reports.assemble", 1)
    parts = workflows.dependency_results(conn, workflows.task_id_of(job["idempotency_key"]))
    run = reports.assemble_run(conn, store, run_id, parts)
    complete(conn, job, None)
    return run


def finish_run(conn, store, run_id, *, order=None) -> dict:
    """Every chunk, then the assembly, through the queue as the worker runs them; returns the run."""
    run_chunks(conn, store, run_id, order=order)
    return assemble(conn, store, run_id)


def _all():
    from opsboard.auth import TenantScope
    return TenantScope(all=True)
