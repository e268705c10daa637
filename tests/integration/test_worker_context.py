"""What a handler sees: bounded connections with the job's statement_timeout, a
synchronous lease check, and effects that only the attempt holding the job may begin."""
import time

import pytest

from opsboard import auth, db, jobqueue
from tests.conftest import connect
from worker.context import JobContext, LeaseLost


@pytest.fixture
def claimed(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue(c, "diag.noop", {}, tenant=t, idempotency_key="inv-1")
        [row] = jobqueue.claim_batch(c, "default", "w-ctx", 1, 30)
    pool = db.make_pool(db_url, min_size=1, max_size=4, name="ctx-test", open=True)
    ctx = JobContext(id=row["id"], type=row["type"], version=row["version"], tenant_id=row["tenant_id"],
                     queue=row["queue"], payload=row["payload"], attempt=row["attempts"],
                     max_attempts=row["max_attempts"], idempotency_key=row["idempotency_key"],
                     group_key=None, correlation_id=None, event_id=None, expires_at=None, worker_id="w-ctx",
                     pool=pool, deadline=time.monotonic() + 5)
    yield ctx
    pool.close()


def test_connections_are_bounded_and_carry_the_jobs_timeout(claimed):
    with claimed.connection() as a:
        ms = int(a.execute("SELECT current_setting('statement_timeout') AS s").fetchone()["s"].rstrip("ms"))
        assert 0 < ms <= 5000
        with claimed.connection():
            with pytest.raises(RuntimeError, match="at most 2 connections"):
                with claimed.connection():
                    pass
    with claimed.connection() as again:  # given back: usable again
        assert again.execute("SELECT 1 AS one").fetchone()["one"] == 1


def test_a_stale_attempt_cannot_begin_or_adopt_an_effect(claimed, db_url):
    assert claimed.still_held()
    first = claimed.begin_effect("smtp")
    assert first["created"] and first["attempt"] == claimed.attempt == 1
    with connect(db_url) as c:
        # The lease is taken over: another worker runs attempt 2.
        c.execute("UPDATE jobs SET locked_by = 'w-other', attempts = 2 WHERE id = %s", (claimed.id,))
        assert not claimed.still_held() and claimed.cancelled.is_set()
        with pytest.raises(LeaseLost):
            claimed.begin_effect("smtp")
        with pytest.raises(LeaseLost):
            claimed.begin_effect("smtp", key="another-effect")
        assert [(e["key"], e["attempt"]) for e in c.execute("SELECT key, attempt FROM effects")] == \
            [(claimed.effect_key(), 1)]
        # A lease that ran out is not held either, even before any reaper.
        c.execute("UPDATE jobs SET locked_by = 'w-ctx', attempts = 1, locked_until = now() - interval '1 s' "
                  "WHERE id = %s", (claimed.id,))
        assert not claimed.still_held()
