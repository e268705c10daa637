"""Concurrency limits per dynamic key (issue 50): a job type's key, computed at enqueue and stored on the
job, limits how many of its jobs with one key run at once, across every worker, at claim time; the
limit is set live (kind ``key``) and audited; webhook deliveries have a default per endpoint."""
from __future__ import annotations

import uuid

from opsboard import audit, auth, db, jobqueue, jobtypes, pauses
from opsboard.deliveries import WEBHOOK_ENDPOINT_CONCURRENCY
from tests.conftest import connect
import tests.support.limits  # noqa: F401  (registers the limited job types)

STAFF = audit.Actor(label="staff:test")


def _types(rows):
    out = {}
    for r in rows:
        out[r["key"]] = out.get(r["key"], 0) + 1
    return out


def _keys_of(c, rows):
    ids = [r["id"] for r in rows]
    got = c.execute("SELECT concurrency_key FROM jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    out = {}
    for r in got:
        out[r["concurrency_key"]] = out.get(r["concurrency_key"], 0) + 1
    return out


def _finish(c, worker, row):
    jobqueue.record_outcomes(c, worker, [jobqueue.OutcomeRecord(row["id"], row["attempts"], "succeeded",
                                                                row["started_at"])])


def test_the_key_is_stored_at_enqueue_by_every_path(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        one = jobqueue.enqueue(c, "test.keyed", {"key": "a", "ms": 1}, tenant=t)
        assert one["concurrency_key"] == "k:a"
        many = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.keyed", {"key": "b", "ms": 1}, t),
                                         jobqueue.NewJob("test.span", {"key": "b", "ms": 1}, t)])
        rows = {r["id"]: r["concurrency_key"] for r in c.execute(
            "SELECT id, concurrency_key FROM jobs WHERE id = ANY(%s)", (many,)).fetchall()}
        assert rows == {many[0]: "k:b", many[1]: None}   # a type without a key stores none
        assert c.execute("SELECT concurrency_key FROM jobs WHERE id = %s", (one["id"],)).fetchone()[
            "concurrency_key"] == "k:a"


def test_at_most_the_limit_per_key_runs_across_workers(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.keyed", {"key": k, "ms": 1}, t) for k in "aaaaaabbbbbb"]
                              + [jobqueue.NewJob("test.span", {"key": "a", "ms": 1}, t) for _ in range(5)])
        rows = jobqueue.claim(c, "default", "w1", 100, 30).rows
        keyed = [r for r in rows if r["type"] == "test.keyed"]
        assert _keys_of(c, keyed) == {"k:a": 2, "k:b": 2}
        # Jobs of a type without a key are not limited by anyone's key.
        assert sum(r["type"] == "test.span" for r in rows) == 5
        # While they run, another worker's claim gets none of those keys.
        assert jobqueue.claim(c, "default", "w2", 100, 30).rows == []
        # One of key a finishes: exactly one more of key a may start.
        _finish(c, "w1", next(r for r in keyed if r["payload"]["key"] == "a"))
        more = jobqueue.claim(c, "default", "w2", 100, 30).rows
        assert [(r["type"], r["payload"]["key"]) for r in more] == [("test.keyed", "a")]


def test_the_limit_per_key_is_set_live_and_audited(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.keyed", {"key": k, "ms": 1}, t) for k in "aaaaaa"])
        assert len(jobqueue.claim(c, "default", "w1", 100, 30).rows) == 2
        got = pauses.set_limit(c, STAFF, "key", "test.keyed", 5, "endpoint can take more")
        assert got["before"] == {"value": 2, "live": False} and got["after"] == {"value": 5, "live": True}
        row = c.execute("SELECT actor_label, target_type, target_id, reason FROM audit_log WHERE action = 'limit.set'"
                        " ORDER BY at DESC LIMIT 1").fetchone()
        assert (row["target_type"], row["target_id"], row["reason"]) == ("key", "test.keyed", "endpoint can take more")
        holds = pauses.read_holds(c)
        assert len(jobqueue.claim(c, "default", "w2", 100, 30, holds=holds).rows) == 3
        # A type without a key has no such limit.
        try:
            pauses.set_limit(c, STAFF, "key", "test.span", 5, "no")
        except Exception as exc:
            assert getattr(exc, "code", None) == "not_found"
        else:
            raise AssertionError("a key limit for a type without a key was accepted")


def test_webhook_deliveries_are_limited_per_endpoint_by_default(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        slow, healthy = uuid.uuid4(), uuid.uuid4()
        jobqueue.enqueue_many(c, [jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(ep), "event_id": str(uuid.uuid4())},
                                                  t) for ep in [slow] * 20 + [healthy] * 3])
        assert "webhook.deliver" in jobtypes.concurrency_limits("default").key_types
        rows = jobqueue.claim(c, "default", "w1", 100, 30).rows
        assert _keys_of(c, rows) == {f"webhook:{slow}": WEBHOOK_ENDPOINT_CONCURRENCY, f"webhook:{healthy}": 3}


def test_a_slowed_key_runs_at_most_its_own_lower_limit_until_it_expires(db_url):
    """Migration 0093: a key's own lower limit (a slow webhook endpoint's 1) holds below the type's until
    its time passes."""
    from datetime import datetime, timedelta, timezone

    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        slow, other = uuid.uuid4(), uuid.uuid4()
        db.execute(c, "job_key_limit_set", {"key": f"webhook:{slow}", "max_running": 1, "seconds": 300,
                                            "reason": "slow_answer:9500ms"})
        jobqueue.enqueue_many(c, [jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(ep), "event_id": str(uuid.uuid4())},
                                                  t) for ep in [slow] * 6 + [other] * 6])
        rows = jobqueue.claim(c, "default", "w1", 100, 30).rows
        assert _keys_of(c, rows) == {f"webhook:{slow}": 1, f"webhook:{other}": WEBHOOK_ENDPOINT_CONCURRENCY}
        # Past its time the type's limit per key holds again (a claim "now" 301 s later).
        later = datetime.now(timezone.utc) + timedelta(seconds=301)
        more = jobqueue.claim(c, "default", "w2", 100, 30, now=later).rows
        assert _keys_of(c, more) == {f"webhook:{slow}": WEBHOOK_ENDPOINT_CONCURRENCY - 1}
