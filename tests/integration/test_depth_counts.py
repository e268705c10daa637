"""The maintained queue depth (migration 0044): every way a job changes is
counted exactly by the per-statement deltas and the leader's fold, checked
against a full recount after each step."""
from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from opsboard import audit, jobqueue, metrics
from opsboard.jobqueue import OutcomeRecord
from tests.conftest import connect
from worker.services.depth import DepthSampler
from worker.services.expiry import Expiry
from worker.services.pruner import Pruner, PrunerConfig
from worker.services.reaper import Reaper


def _kept(c) -> dict:
    return {(r["type"], r["status"]): int(r["jobs"]) for r in
            c.execute("SELECT type, status::text AS status, sum(jobs) AS jobs FROM queue_depth "
                      "GROUP BY type, status HAVING sum(jobs) <> 0").fetchall()}


def _check(c) -> dict:
    """Fold, then: the maintained depth equals the recount, and nothing is left unfolded."""
    DepthSampler().run_once(c)
    assert metrics.depth_drift(c) == []
    assert c.execute("SELECT count(*) AS n FROM job_count_deltas").fetchone()["n"] == 0
    recount = {(r["type"], r["status"]): int(r["n"]) for r in c.execute(
        "SELECT type, status::text AS status, count(*) AS n FROM jobs "
        "WHERE status IN ('pending', 'retryable', 'dead', 'running') GROUP BY type, status").fetchall()}
    assert _kept(c) == recount
    return recount


def _outcome(job, kind, **kw) -> OutcomeRecord:
    return OutcomeRecord(job["id"], job["attempts"], kind, job["started_at"], **kw)


def test_every_transition_is_counted(conn, tenant, t0):
    c = conn
    actor = audit.Actor("test")
    jobqueue.enqueue(c, "diag.noop", {}, tenant=tenant)                                   # job_insert
    jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenant) for _ in range(9)])  # COPY
    jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenant, idempotency_key=f"k{i}")
                              for i in range(3)])                                          # job_insert_many
    jobqueue.enqueue(c, "diag.sleep", {"ms": 1}, tenant=tenant, run_at=t0 + timedelta(hours=1))  # scheduled
    jobqueue.enqueue(c, "diag.sleep", {"ms": 1}, tenant=tenant, expires_at=t0 - timedelta(seconds=1))
    assert _check(c) == {("diag.noop", "pending"): 13, ("diag.sleep", "pending"): 2}

    claimed = jobqueue.claim_batch(c, "default", "w1", 8, 30)
    assert len(claimed) == 8
    assert _check(c)[("diag.noop", "running")] == 8

    jobqueue.record_outcomes(c, "w1", [_outcome(claimed[0], "succeeded"), _outcome(claimed[1], "succeeded"),
                                       _outcome(claimed[2], "retryable", delay=60, code="http_503"),
                                       _outcome(claimed[3], "dead", code="http_410"),
                                       _outcome(claimed[4], "snoozed", delay=1),
                                       _outcome(claimed[5], "released")])
    counts = _check(c)
    assert counts[("diag.noop", "retryable")] == 1 and counts[("diag.noop", "dead")] == 1
    assert counts[("diag.noop", "running")] == 2

    # The lease reaper: claimed[6] and [7] lost their worker.
    Reaper().run_once(c, now=t0 + timedelta(hours=2))
    counts = _check(c)
    assert ("diag.noop", "running") not in counts and counts[("diag.noop", "retryable")] == 3

    # Expiry, a single cancel, a bulk cancel.
    assert Expiry().run_once(c, now=t0) >= 1
    assert _check(c)[("diag.sleep", "dead")] == 1
    victim = c.execute("SELECT id FROM jobs WHERE status = 'pending' AND type = 'diag.noop' LIMIT 1").fetchone()["id"]
    jobqueue.cancel(c, victim)
    jobqueue.cancel_many(c, jobqueue.CancelFilter(type="diag.sleep"), actor, "test", None)
    counts = _check(c)
    assert ("diag.sleep", "pending") not in counts

    # A replay makes a new pending job; the dead one stays.
    dead = c.execute("SELECT id FROM jobs WHERE status = 'dead' AND type = 'diag.noop'").fetchone()["id"]
    jobqueue.replay(c, dead, actor, "fixed", None)
    counts = _check(c)
    assert counts[("diag.noop", "dead")] == 1

    # The pruner deletes finished jobs (no delta); a dead job deleted by hand is counted out.
    Pruner(PrunerConfig(dead_retention_days=0)).run_once(c, now=t0 + timedelta(days=365))  # dead kept: counted below
    c.execute("DELETE FROM jobs WHERE status = 'dead' AND type = 'diag.sleep'")
    counts = _check(c)
    assert ("diag.sleep", "dead") not in counts and counts[("diag.noop", "dead")] == 1

    # TRUNCATE empties the counts with the table.
    c.execute("TRUNCATE jobs CASCADE")
    assert _check(c) == {} and c.execute("SELECT count(*) AS n FROM queue_depth").fetchone()["n"] == 0


def test_oldest_ready_follows_jobs_in_and_out(conn, tenant, t0):
    c = conn
    jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {"i": i}, tenant, run_at=t0 - timedelta(seconds=60 - i))
                              for i in range(5)])
    jobqueue.enqueue(c, "diag.noop", {}, tenant=tenant, run_at=t0 + timedelta(hours=1))

    def oldest():
        DepthSampler().run_once(c, now=t0)
        return c.execute("SELECT oldest_ready, oldest_stale FROM queue_depth WHERE status = 'pending'").fetchone()

    assert oldest() == {"oldest_ready": t0 - timedelta(seconds=60), "oldest_stale": False}
    # The claim takes the oldest two: the fold re-reads the group's oldest.
    jobqueue.claim_batch(c, "default", "w1", 2, 30, now=t0)
    assert oldest() == {"oldest_ready": t0 - timedelta(seconds=58), "oldest_stale": False}
    # What is shown is only due: a group whose earliest job is in the future shows none.
    c.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE status = 'pending' "
              "AND available_at <= %s", (t0,))
    assert oldest() == {"oldest_ready": t0 + timedelta(hours=1), "oldest_stale": False}
    rows = c.execute("SELECT * FROM queue_depth WHERE status = 'pending'").fetchall()
    assert len(rows) == 1
    from opsboard.auth import TenantScope
    health = metrics.queue_health(c, TenantScope(all=True), now=t0)
    noop = next(t for q in health for t in q.types if t.type == "diag.noop")
    assert noop.depth["pending"] == 1 and noop.oldest_age_seconds is None


def test_a_fold_cut_short_counts_nothing_twice(db_url):
    """The fold deletes the deltas it applies in the same transaction: a leader
    killed mid-fold commits neither; a writer's uncommitted deltas wait for the next fold."""
    with connect(db_url) as c, connect(db_url) as writer:
        from opsboard import auth
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(5)])
        with pytest.raises(psycopg.errors.QueryCanceled):
            with c.transaction():
                c.execute("SELECT count(*) FROM job_count_deltas")  # the fold's own work, then killed:
                from opsboard import db
                db.all_rows(c, "queue_depth_fold", {"now": None})
                c.execute("SET LOCAL statement_timeout = 1")
                c.execute("SELECT pg_sleep(1)")
        assert c.execute("SELECT sum(delta) AS n FROM job_count_deltas").fetchone()["n"] == 5
        # A writer in the middle of its transaction while the leader folds.
        with writer.transaction():
            jobqueue.enqueue_many(writer, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(3)])
            DepthSampler().run_once(c)
            assert _kept(c) == {("diag.noop", "pending"): 5}
        DepthSampler().run_once(c)
        assert _kept(c) == {("diag.noop", "pending"): 8}
        assert metrics.depth_drift(c) == []


def test_depth_check_finds_and_repairs_a_drifted_count(conn, tenant):
    """``opsboard depth-check``'s two halves: a maintained count that drifted from the recount
    (queue_depth against the jobs, tenant_depth against queue_depth) is reported, and the repair
    rebuilds both from the jobs."""
    jobqueue.enqueue_many(conn, [jobqueue.NewJob("diag.noop", {}, tenant["id"]) for _ in range(4)])
    _check(conn)
    conn.execute("UPDATE queue_depth SET jobs = jobs + 2 WHERE tenant_id = %s AND status = 'pending'",
                 (tenant["id"],))
    conn.execute("UPDATE tenant_depth SET dead = dead + 3 WHERE tenant_id = %s", (tenant["id"],))
    drift = {(r["queue"], r["status"]): (r["counted"], r["maintained"]) for r in metrics.depth_drift(conn)}
    assert drift[("default", "pending")] == (4, 6)            # queue_depth against the jobs
    assert drift[("*", "dead")] == (0, 3)                     # tenant_depth against queue_depth
    metrics.depth_repair(conn)
    assert metrics.depth_drift(conn) == []
    row = conn.execute("SELECT pending, dead FROM tenant_depth WHERE tenant_id = %s", (tenant["id"],)).fetchone()
    assert (row["pending"], row["dead"]) == (4, 0)


def test_the_fold_leaves_no_dead_deltas_behind_a_pinned_horizon(db_url):
    """issue 48 (migration 0086): the fold empties the partition the triggers wrote before it by
    TRUNCATE, so the deltas leave no dead row versions even while a snapshot pins the horizon (where
    a DELETE's versions stay until vacuum may remove them: 25-30 % of the table was dead in steady
    state).  The counts stay exact across the rotation."""
    with connect(db_url) as c, connect(db_url) as pin:
        from opsboard import auth
        t = auth.ensure_tenant(c, "acme")["id"]
        pin.autocommit = False
        pin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT txid_current(), count(*) FROM jobs")  # an idle transaction holding its xmin
        try:
            for round_ in range(1, 5):
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(3)])
                jobqueue.claim_batch(c, "default", "w1", 1, 30)
                _check(c)
                assert _kept(c) == {("diag.noop", "pending"): 3 * round_ - round_,
                                    ("diag.noop", "running"): round_}
                sizes = c.execute("SELECT pg_relation_size('job_count_deltas_0') + "
                                  "pg_relation_size('job_count_deltas_1') AS b").fetchone()["b"]
                assert sizes == 0, f"round {round_}: {sizes} bytes of dead deltas"
        finally:
            pin.rollback()
