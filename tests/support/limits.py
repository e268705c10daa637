"""Job types with concurrency and rate limits (tests of issue 4)."""
from __future__ import annotations

import time

from opsboard.jobtypes import Field, define, define_provider



def overlap(job):
    """Record [start, end] of the handler so the test can compute the peak concurrency."""
    with job.connection() as conn:
        conn.execute("INSERT INTO test_spans (job_id, key, kind, started_at) VALUES (%s, %s, %s, clock_timestamp())",
                     (job.id, job.payload["key"], job.type))
    time.sleep(job.payload["ms"] / 1000)
    with job.connection() as conn:
        conn.execute("UPDATE test_spans SET ended_at = clock_timestamp() WHERE job_id = %s AND ended_at IS NULL",
                     (job.id,))


def keyed_by_payload(payload: dict, tenant_id) -> str:
    return f"k:{payload['key']}"


def register(cat) -> None:
    """Job types with concurrency and rate limits."""
    define_provider(cat, "test_sms_gateway", concurrency=2)
    define_provider(cat, "test_rated", rate_per_second=20, burst=5)
    # A type limit and two types sharing one provider limit.
    define(cat, "test.limited", handler="tests.support.limits:overlap", concurrency=3,
           fields={"key": Field(str), "ms": Field(int)}, max_attempts=3, timeout=30)
    define(cat, "test.sms_a", handler="tests.support.limits:overlap", provider="test_sms_gateway",
           fields={"key": Field(str), "ms": Field(int)}, max_attempts=3, timeout=30)
    define(cat, "test.sms_b", handler="tests.support.limits:overlap", provider="test_sms_gateway",
           fields={"key": Field(str), "ms": Field(int)}, max_attempts=3, timeout=30)
    # No limit at all: its peak is what the worker's slots allow (live slot changes, issue 28).
    define(cat, "test.span", handler="tests.support.limits:overlap",
           fields={"key": Field(str), "ms": Field(int)}, max_attempts=3, timeout=30)
    # At most two running per concurrency key (the payload's key), across workers (issue 50).
    define(cat, "test.keyed", handler="tests.support.limits:overlap", concurrency_key=keyed_by_payload,
           key_concurrency=2, fields={"key": Field(str), "ms": Field(int)}, max_attempts=3, timeout=30)
    define(cat, "test.rated", handler="tests.support.limits:overlap", provider="test_rated",
           fields={"key": Field(str), "ms": Field(int)}, max_attempts=1, timeout=30)
