"""Tenant-fair claims, weights, priorities, limits at claim time (real PostgreSQL, injected now)."""
from __future__ import annotations

import uuid

import pytest

import psycopg

from opsboard import auth, jobqueue, jobtypes
from tests.conftest import connect
import tests.support.limits  # noqa: F401  (registers the limited job types)


def _claim_all(c, q="default", limit=10, worker="w1", max_batches=1000):
    cursor, batches = jobqueue.ZERO_TENANT, []
    for _ in range(max_batches):
        got = jobqueue.claim(c, q, worker, limit, 30, after_tenant=cursor)
        if not got.rows:
            break
        cursor = got.next_after_tenant
        batches.append(got.rows)
        jobqueue.record_outcomes(c, worker, [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded", r["started_at"])
                                          for r in got.rows])
    return batches


def test_light_tenant_starts_within_first_batches_despite_heavy_backlog(db_url):
    with connect(db_url) as c:
        heavy = auth.ensure_tenant(c, "heavy")["id"]
        light = auth.ensure_tenant(c, "light")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, heavy) for _ in range(5000)])
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, light) for _ in range(20)])
        batches = []
        cursor = jobqueue.ZERO_TENANT
        light_seen = 0
        while light_seen < 20:
            got = jobqueue.claim(c, "default", "w1", 10, 30, after_tenant=cursor)
            cursor = got.next_after_tenant
            batches.append(got.rows)
            light_seen += sum(1 for r in got.rows if r["tenant_id"] == light)
            assert len(batches) < 50, "light tenant starved"
        # Two tenants share each batch of 10 about evenly: 20 light jobs in ~4 batches, not after 5000.
        assert len(batches) <= 5
        assert sum(1 for b in batches for r in b if r["tenant_id"] == heavy) <= 30
        assert len(batches) >= 2 and [len(b) for b in batches[:-1]] == [10] * (len(batches) - 1)


def test_round_robin_cursor_visits_every_tenant(db_url):
    with connect(db_url) as c:
        tenants = [auth.ensure_tenant(c, f"t{i:02d}")["id"] for i in range(12)]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for t in tenants for _ in range(5)])
        first = jobqueue.claim(c, "default", "w1", 4, 30)
        second = jobqueue.claim(c, "default", "w1", 4, 30, after_tenant=first.next_after_tenant)
        third = jobqueue.claim(c, "default", "w1", 4, 30, after_tenant=second.next_after_tenant)
        seen = [r["tenant_id"] for b in (first, second, third) for r in b.rows]
        # 12 tenants, batches of 4 visiting 4 tenants each: every tenant once, none twice.
        assert sorted(seen) == sorted(tenants)


def test_weights_give_proportional_share(db_url):
    with connect(db_url) as c:
        big = auth.ensure_tenant(c, "big", weight=3)["id"]
        small = auth.ensure_tenant(c, "small", weight=1)["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for t in (big, small) for _ in range(100)])
        rows = jobqueue.claim(c, "default", "w1", 40, 30).rows
        n_big = sum(1 for r in rows if r["tenant_id"] == big)
        assert len(rows) == 40
        assert n_big == 30


def test_priority_inside_a_tenant_and_queue(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        low = jobqueue.enqueue(c, "diag.noop", {}, tenant=t, priority=200)
        high = jobqueue.enqueue(c, "diag.noop", {}, tenant=t, priority=0)
        rows = jobqueue.claim(c, "default", "w1", 1, 30).rows
        assert [r["id"] for r in rows] == [high["id"]]
        assert jobqueue.claim(c, "default", "w1", 1, 30).rows[0]["id"] == low["id"]


def test_queues_are_separate(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(50)])
        otp = jobqueue.enqueue(c, "diag.sleep", {"ms": 1}, version=2, tenant=t)
        assert otp["queue"] == "critical"
        rows = jobqueue.claim(c, "critical", "w1", 10, 30).rows
        assert [r["id"] for r in rows] == [otp["id"]]
        rows = jobqueue.claim(c, "default", "w1", 100, 30).rows
        assert len(rows) == 50 and {r["queue"] for r in rows} == {"default"}


def test_type_and_provider_limits_at_claim_time(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.limited", {"key": "x", "ms": 1}, t) for _ in range(10)]
                           + [jobqueue.NewJob("test.sms_a", {"key": "x", "ms": 1}, t) for _ in range(5)]
                           + [jobqueue.NewJob("test.sms_b", {"key": "x", "ms": 1}, t) for _ in range(5)])
        rows = jobqueue.claim(c, "default", "w1", 100, 30).rows
        by_type = {}
        for r in rows:
            by_type[r["type"]] = by_type.get(r["type"], 0) + 1
        assert by_type.get("test.limited") == 3
        assert by_type.get("test.sms_a", 0) + by_type.get("test.sms_b", 0) == 2
        # While they run, a second claim (another worker) gets none of the limited work.
        assert jobqueue.claim(c, "default", "w2", 100, 30).rows == []
        # One finishes: exactly one more of that type may start.
        done = next(r for r in rows if r["type"] == "test.limited")
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(done["id"], done["attempts"], "succeeded",
                                                            done["started_at"])])
        more = jobqueue.claim(c, "default", "w2", 100, 30).rows
        assert [r["type"] for r in more] == ["test.limited"]


def test_dead_job_in_group_does_not_block_the_rest(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {"n": i}, t, group_key="order-1") for i in range(3)])
        first = jobqueue.claim(c, "default", "w1", 10, 30).rows
        assert [r["id"] for r in first] == [ids[0]]
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(ids[0], 1, "dead", first[0]["started_at"], code="boom")])
        second = jobqueue.claim(c, "default", "w1", 10, 30).rows
        assert [r["id"] for r in second] == [ids[1]]


def test_a_claim_that_fails_under_its_limit_locks_leaves_the_connection_idle_and_usable(db_url):
    """The locked claim is one pipelined BEGIN .. COMMIT: a statement that fails in it must not hand
    the pool a connection stuck in an aborted transaction."""
    names = jobtypes.concurrency_limits("default").lock_names
    assert names  # the default queue has limited providers (email, SMS, push)
    with connect(db_url) as holder, connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue(c, "test.limited", {"key": "x", "ms": 1}, tenant=t)
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.limit.' || %s, 0))",
                           (names[0],))
            c.execute("SET statement_timeout = 200")  # the server cancels the claim's wait for the lock
            with pytest.raises(psycopg.errors.QueryCanceled):
                jobqueue.claim(c, "default", "w1", 10, 30)
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        c.execute("SET statement_timeout = 0")
        assert [r["type"] for r in jobqueue.claim(c, "default", "w1", 10, 30).rows] == ["test.limited"]


def test_a_claim_takes_unlimited_work_without_the_limit_locks_and_stops_at_the_first_limited_job(db_url):
    """Work that no limit covers is claimed without waiting for the limit locks (two workers'
    claims queued on them); the claim stops at the first job that needs them, so the claim under
    the locks goes on in the same fair order (the job behind the limited one does not pass it)."""
    names = jobtypes.concurrency_limits("default").lock_names
    with connect(db_url) as holder, connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        first = jobqueue.enqueue(c, "test.span", {"key": "a", "ms": 1}, tenant=t)
        limited = jobqueue.enqueue(c, "test.limited", {"key": "b", "ms": 1}, tenant=t)
        behind = jobqueue.enqueue(c, "test.span", {"key": "c", "ms": 1}, tenant=t)
        assert first["priority"] == limited["priority"] == behind["priority"]
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.limit.' || %s, 0))",
                           (names[0],))
            c.execute("SET statement_timeout = 300")  # the claim under the locks is cancelled
            got = jobqueue.claim(c, "default", "w1", 10, 30)
            # What was claimed before that is handed over, not left running until its lease ends.
            assert [r["id"] for r in got.rows] == [first["id"]]
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        c.execute("SET statement_timeout = 0")
        rest = jobqueue.claim(c, "default", "w1", 10, 30).rows
        assert [r["id"] for r in rest] == [limited["id"], behind["id"]]


def test_a_claim_led_by_limited_work_has_the_next_take_the_locks_first_and_walk_once(db_url):
    """At 10,000,000 jobs a flood of a limited type made each claim walk twice (without the locks,
    a few jobs; under them, the rest: 5.8 + 10.8 ms, `opsboard bench --scenario scale`).  A claim
    that got most of its batch under the locks says so (locked_next) and the next one takes them
    first: one walk, the same limits."""
    names = jobtypes.concurrency_limits("default").lock_names
    with connect(db_url) as holder, connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.limited", {"key": f"l{i}", "ms": 1}, t) for i in range(6)])
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.span", {"key": f"s{i}", "ms": 1}, t) for i in range(6)])
        first = jobqueue.claim(c, "default", "w1", 5, 30)
        # The tenant offers its first 5 (all limited): 3 may run, all claimed under the locks.
        assert [r["type"] for r in first.rows] == ["test.limited"] * 3
        assert first.locked_next
        # Under the locks from its start: with them held elsewhere it claims nothing before it waits
        # (the walk without them would hand over this unlimited job first, as in the test above).
        ahead = jobqueue.enqueue(c, "test.span", {"key": "ahead", "ms": 1}, tenant=t, priority=1)
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.limit.' || %s, 0))",
                           (names[0],))
            c.execute("SET statement_timeout = 300")
            with pytest.raises(psycopg.errors.QueryCanceled):
                jobqueue.claim(c, "default", "w1", 5, 30, locked_first=True)
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT status FROM jobs WHERE id = %s", (ahead["id"],)).fetchone()["status"] == "pending"
        second = jobqueue.claim(c, "default", "w1", 5, 30, locked_first=True)
        # The type's limit (3) still holds: of the next 5 (3 limited, 2 not), the unlimited ones.
        assert [r["type"] for r in second.rows] == ["test.span"] * 2 and ahead["id"] in {r["id"] for r in second.rows}
        assert second.locked_next  # limited jobs are still among the candidates
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded", r["started_at"])
                                           for r in first.rows + second.rows])
        third = jobqueue.claim(c, "default", "w1", 5, 30, locked_first=True)
        assert sorted(r["type"] for r in third.rows) == ["test.limited"] * 3 + ["test.span"] * 2
        assert third.locked_next
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded", r["started_at"])
                                           for r in third.rows])
        # No limited work left: back to the walk without the locks.
        jobqueue.enqueue(c, "test.span", {"key": "late", "ms": 1}, tenant=t)
        last = jobqueue.claim(c, "default", "w1", 5, 30, locked_first=True)
        assert [r["type"] for r in last.rows] == ["test.span"] * 4 and not last.locked_next


def _running(c, provider_types):
    return c.execute("SELECT queue, count(*) AS n FROM jobs WHERE status = 'running' AND type = ANY(%s) "
                     "GROUP BY queue ORDER BY queue", (list(provider_types),)).fetchall()


def test_a_providers_critical_share_is_claimed_apart_from_the_default_queue_and_the_limit_holds(db_url):
    """sms_gateway: 8 at once, 4 of them the critical queue's (sms.otp).  A critical claim takes
    its share under a lock of its own, so it does not wait while a default claim holds
    ``provider:sms_gateway`` (the OTP queued behind the broadcast's claims); a backlog of sms.send
    never takes the OTPs' share; together they never pass the provider's limit."""
    prov = jobtypes.provider("sms_gateway")
    share, total = prov.critical_concurrency, prov.concurrency
    assert 1 <= share < total
    with connect(db_url) as holder, connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("sms.send", {"message_id": str(uuid.uuid4())}, t)
                                  for _ in range(3 * total)])
        jobqueue.enqueue_many(c, [jobqueue.NewJob("sms.otp", {"message_id": str(uuid.uuid4())}, t)
                                  for _ in range(3 * total)])
        got = jobqueue.claim(c, "default", "w1", 100, 30).rows
        assert [r["type"] for r in got] == ["sms.send"] * (total - share)
        with holder.transaction():
            # A default claim holds the provider's lock (as through its statement and commit).
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('opsboard.limit.' || %s, 0))",
                           ("provider:sms_gateway",))
            c.execute("SET statement_timeout = 2000")  # waiting on that lock would fail the claim
            otp = jobqueue.claim(c, "critical", "w1", 100, 30).rows
            c.execute("SET statement_timeout = 0")
        assert [r["type"] for r in otp] == ["sms.otp"] * share
        # Both sides full: nothing more from either, the provider at its limit and no further.
        assert jobqueue.claim(c, "default", "w2", 100, 30).rows == []
        assert jobqueue.claim(c, "critical", "w2", 100, 30).rows == []
        assert [(r["queue"], r["n"]) for r in _running(c, ("sms.send", "sms.otp"))] == \
            [("critical", share), ("default", total - share)]
        # An sms.send that runs in the critical queue (a producer's queue override) counts
        # against the critical share, not beside it.
        jobqueue.record_outcomes(c, "w1", [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded",
                                                                  r["started_at"]) for r in otp[:1]])
        jobqueue.enqueue(c, "sms.send", {"message_id": str(uuid.uuid4())}, tenant=t, queue="critical", priority=-1)
        more = jobqueue.claim(c, "critical", "w2", 100, 30).rows
        assert [r["type"] for r in more] == ["sms.send"]
        assert jobqueue.claim(c, "critical", "w2", 100, 30).rows == []
        assert sum(r["n"] for r in _running(c, ("sms.send", "sms.otp"))) == total
    crit_locks = jobtypes.concurrency_limits("critical").lock_names
    default_locks = jobtypes.concurrency_limits("default").lock_names
    assert "provider:sms_gateway@critical" in crit_locks and "provider:sms_gateway" in default_locks
    assert not set(crit_locks) & set(default_locks)


def test_a_live_provider_limit_keeps_the_critical_share_below_it_and_one_shared_limit_at_one():
    live = (("provider", "sms_gateway", 3),)
    crit, default = jobtypes.concurrency_limits("critical", live), jobtypes.concurrency_limits("default", live)
    assert dict(zip(crit.groups, crit.group_limits))["sms_gateway@critical"] == 2
    assert dict(zip(default.groups, default.group_limits))["sms_gateway"] == 1
    one = (("provider", "sms_gateway", 1),)
    crit, default = jobtypes.concurrency_limits("critical", one), jobtypes.concurrency_limits("default", one)
    assert "provider:sms_gateway" in crit.lock_names and "provider:sms_gateway" in default.lock_names
    assert dict(zip(crit.groups, zip(crit.group_limits, crit.group_sides)))["sms_gateway"] == (1, "")
