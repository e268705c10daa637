"""Job types of the workflow, batch and result tests (loaded through OPSBOARD_JOB_MODULES)."""
from __future__ import annotations

import time

from opsboard import retry
from opsboard.jobtypes import define


def echo(job):
    """Return payload["value"] as the job's result (after payload["ms"] milliseconds)."""
    if job.payload.get("ms"):
        time.sleep(job.payload["ms"] / 1000)
    return job.payload.get("value")


def total(job):
    """Return the sum of the dependencies' numeric results, and their names."""
    deps = job.dependency_results()
    return {"sum": sum(v if isinstance(v, (int, float)) else (v or {}).get("sum", 0) for v in deps.values()),
            "deps": sorted(deps)}


def fail(job):
    return retry.Permanent("wft_failed", "this task fails on purpose")


def grow(job):
    """Add payload["add"] echo members to this job's own batch (once per key: a retry adds none)."""
    n = job.payload.get("add", 0)
    if n:
        job.add_to_batch([{"name": f"{job.payload['key']}-grown-{i}", "type": "wft.echo", "payload": {"value": i}}
                          for i in range(n)])
    return job.payload.get("value")


def record(job):
    """One row per run in test_wf_runs (the test creates it); sleeps payload["ms"] first."""
    if job.payload.get("ms"):
        time.sleep(job.payload["ms"] / 1000)
    with job.connection() as conn:
        conn.execute("INSERT INTO test_wf_runs (key, job_id, attempt) VALUES (%s, %s, %s)",
                     (job.payload["key"], job.id, job.attempt))
    return job.payload.get("value")


def register(cat) -> None:
    define(cat, "wft.echo", handler=echo, max_attempts=3, timeout=10, public=True)
    define(cat, "wft.total", handler=total, max_attempts=3, timeout=10, public=True)
    define(cat, "wft.fail", handler=fail, max_attempts=1, timeout=10, public=True)
    define(cat, "wft.grow", handler=grow, max_attempts=5, timeout=10)
    define(cat, "wft.record", handler=record, max_attempts=25, timeout=10)
    define(cat, "wft.flaky", handler=flaky, max_attempts=1, timeout=10)


def flaky(job):
    """Fail for good until the test has put payload["key"] into test_wf_ok."""
    with job.connection() as conn:
        ok = conn.execute("SELECT 1 FROM test_wf_ok WHERE key = %s", (job.payload["key"],)).fetchone()
    if ok is None:
        return retry.Permanent("wft_not_yet", "not yet")
    return job.payload.get("value")

