"""Job types used by the tests (loaded through OPSBOARD_JOB_MODULES)."""
from __future__ import annotations

import os
import signal
import threading
import time

from opsboard import retry
from opsboard.jobtypes import Field, define



def record(job):
    """Insert one row per run into test_effects (the test creates the table)."""
    if job.payload.get("ms"):
        time.sleep(job.payload["ms"] / 1000)
    with job.connection() as conn:
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, job.payload["key"], job.worker_id, job.attempt))


def always_raise(job):
    raise RuntimeError("boom: contact ops@example.com")


def permanent(job):
    return retry.Permanent("http_410", "gone")


def hang(job):
    threading.Event().wait(3)  # ignores cancellation on purpose


def suicide(job):
    os.kill(os.getpid(), signal.SIGKILL)


def snooze_once(job):
    with job.connection() as conn:
        seen = conn.execute("SELECT count(*) AS n FROM test_effects WHERE key = %s", (job.payload["key"],)).fetchone()["n"]
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, job.payload["key"], job.worker_id, job.attempt))
    if seen == 0:
        return retry.Snooze(seconds=0.05)
    return None


def slow(job):
    with job.connection() as conn:
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, job.payload["key"], job.worker_id, job.attempt))
    job.cancelled.wait(job.payload["ms"] / 1000)


def retry_after(job):
    return retry.Retryable("http_429", retry_after=float(job.payload["after"]), detail="rate limited")




def effect_once(job):
    """Send at most once: the first attempt 'sends' and then times out ambiguously;
    the retry finds the started effect and reconciles instead of sending again."""
    effect = job.begin_effect("test_provider")
    if effect["state"] == "confirmed":
        return retry.Success(ref=effect["provider_ref"])
    with job.connection() as conn:
        sent = conn.execute("SELECT count(*) AS n FROM test_effects WHERE key = %s", (job.payload["key"],)).fetchone()["n"]
        if not effect["created"] and sent:
            return retry.Success(ref="reconciled")  # the provider says it has it: confirm, do not resend
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, job.payload["key"], job.worker_id, job.attempt))
    job.set_effect_ref(f"msg-{job.attempt}")
    if job.attempt == 1:
        return retry.Unknown("provider_timeout")  # ambiguous: did it arrive?
    return retry.Success()




def slow_query(job):
    """Hang in the database (the handler itself ignores its timeout)."""
    with job.connection() as conn:
        conn.execute("SELECT pg_sleep(35)")




def _mark(job, key):
    with job.connection() as conn:
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, key, job.worker_id, job.attempt))


def guarded(job):
    """Check, get paused (the test's SIGSTOP lands in the sleep), then begin a guarded effect and 'send'."""
    from worker.context import LeaseLost

    _mark(job, "ready")
    if job.attempt == 1 and not job.cancelled.is_set():
        time.sleep(3)
    try:
        job.begin_effect("test_provider")
    except LeaseLost:
        _mark(job, "stale" if not job.still_held() else "confused")
        raise
    _mark(job, job.payload["key"])


def settings(job):
    """Record what the handler's connection runs with: ``settings <statement_timeout> <jit>``."""
    with job.connection() as conn:
        row = conn.execute("SELECT current_setting('statement_timeout') AS st, current_setting('jit') AS jit").fetchone()
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, f"settings {row['st']} {row['jit']}", job.worker_id, job.attempt))


def register(cat) -> None:
    """The tests' job types (OPSBOARD_JOB_MODULES=tests.support.jobs)."""
    define(cat, "test.record", handler="tests.support.jobs:record", fields={"key": Field(str), "ms": Field(int, required=False)},
           max_attempts=3, timeout=10, backoff_base=0.05, backoff_cap=0.2, public=True)
    define(cat, "test.record", 2, handler="tests.support.jobs:record", queue="critical",
           fields={"key": Field(str), "ms": Field(int, required=False)}, max_attempts=3, timeout=10, public=True)
    define(cat, "test.raise", handler="tests.support.jobs:always_raise", max_attempts=3, backoff_base=0.01, backoff_cap=0.05)
    define(cat, "test.permanent", handler="tests.support.jobs:permanent", max_attempts=5)
    define(cat, "test.hang", handler="tests.support.jobs:hang", max_attempts=2, timeout=0.5, backoff_base=0.01, backoff_cap=0.05)
    define(cat, "test.suicide", handler="tests.support.jobs:suicide", max_attempts=2, timeout=5)
    define(cat, "test.snooze", handler="tests.support.jobs:snooze_once", fields={"key": Field(str)}, max_attempts=1)
    define(cat, "test.slow", handler="tests.support.jobs:slow", fields={"key": Field(str), "ms": Field(int)},
           max_attempts=3, timeout=30)
    # A provider answering 429 with the given Retry-After (a string, so that "inf" fits in JSON).
    define(cat, "test.retry_after", handler="tests.support.jobs:retry_after", fields={"after": Field(str)},
           max_attempts=3, backoff_base=0.01, backoff_cap=0.05)
    define(cat, "test.effect", handler="tests.support.jobs:effect_once", fields={"key": Field(str)}, max_attempts=3,
           backoff_base=0.01, backoff_cap=0.05)
    define(cat, "test.slow_query", handler="tests.support.jobs:slow_query", max_attempts=1, timeout=1)
    define(cat, "test.settings", handler="tests.support.jobs:settings", max_attempts=1, timeout=10)
    define(cat, "test.guarded", handler="tests.support.jobs:guarded", fields={"key": Field(str)}, max_attempts=3,
           timeout=30, backoff_base=0.01, backoff_cap=0.05)
