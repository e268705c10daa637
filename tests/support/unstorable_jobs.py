"""Job types whose handlers fail with words PostgreSQL cannot store (issue 51), loaded through
OPSBOARD_JOB_MODULES by the worker test: a NUL or a lone surrogate in an exception's message, in a
Permanent's code or detail, or a surrogate-escaped provider reply."""
from __future__ import annotations

from opsboard import retry
from opsboard.jobtypes import Field, define

#: What each bad handler says, by the payload's ``say``.
WORDS = {
    "surrogate": lambda: RuntimeError("provider said: half a pair \udc00"),
    "nul": lambda: RuntimeError("bad \x00 byte"),
    "escaped": lambda: RuntimeError(b"SMTP 550 \xff\xfe mailbox".decode("utf-8", "surrogateescape")),
}


def plain(job):
    """Record one run in test_effects (the test creates the table)."""
    with job.connection() as conn:
        conn.execute("INSERT INTO test_effects (job_id, key, worker, attempt) VALUES (%s, %s, %s, %s)",
                     (job.id, job.payload["key"], job.worker_id, job.attempt))


def bad_words(job):
    say = job.payload["say"]
    if say == "permanent":
        return retry.Permanent("gone\x00\ud800", detail="a\x00b \udfff")
    raise WORDS[say]()


def register(cat) -> None:
    define(cat, "unstorable.plain", handler="tests.support.unstorable_jobs:plain", fields={"key": Field(str)},
           max_attempts=3, timeout=10, backoff_base=0.01, backoff_cap=0.05)
    define(cat, "unstorable.bad", handler="tests.support.unstorable_jobs:bad_words", fields={"say": Field(str)},
           max_attempts=2, timeout=10, backoff_base=0.01, backoff_cap=0.05)
