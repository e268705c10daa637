"""The maintained queue depth through real worker processes: a mixed workload
(successes, retries, dead letters, snoozes, scheduled and expiring jobs, a
cancel, a replay, a lost lease, the pruner) while the leader folds, then the
maintained counts equal a full recount."""
from __future__ import annotations

import signal
from datetime import timedelta

from opsboard import audit, auth, jobqueue, metrics
from opsboard.jobqueue import NewJob
from tests.conftest import connect, wait_for
from worker.services.depth import DepthSampler
from worker.services.pruner import Pruner, PrunerConfig
from worker.services.reaper import Reaper

FAST = {"OPSBOARD_POLL_INTERVAL": "0.2"}


def test_maintained_depth_equals_a_recount_after_a_mixed_workload(db_url, start_worker):
    with connect(db_url) as c:
        t0 = c.execute("SELECT now() AS n").fetchone()["n"]
        tenants = [auth.ensure_tenant(c, f"t{i}")["id"] for i in range(3)]
        jobs = []
        for i in range(120):
            t = tenants[i % 3]
            jobs.append(NewJob("test.record", {"key": f"r{i}"}, t))
            if i % 6 == 0:
                jobs.append(NewJob("test.raise", {}, t))                      # retried, then dead
                jobs.append(NewJob("test.permanent", {}, t))                  # dead at once
                jobs.append(NewJob("test.snooze", {"key": f"s{i}"}, t))      # back to pending, then done
                jobs.append(NewJob("test.retry_after", {"after": "3600"}, t))  # waits retryable
                jobs.append(NewJob("test.record", {"key": f"later{i}"}, t, run_at=t0 + timedelta(hours=1)))
                jobs.append(NewJob("test.record", {"key": f"stale{i}"}, t, queue="bulk",  # not served here:
                                   expires_at=t0 + timedelta(seconds=2)))   # expires before it runs
        jobqueue.enqueue_many(c, jobs)
        c.execute("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int)")
    w = start_worker(db_url, "--queues", "default=8", **FAST)
    with connect(db_url) as c:
        def settled():
            return c.execute("SELECT count(*) AS n FROM jobs WHERE status IN ('running') OR (status IN "
                             "('pending', 'retryable') AND available_at <= now())").fetchone()["n"] == 0 and \
                c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'dead' AND last_error_code = 'expired'"
                          ).fetchone()["n"] == 20
        wait_for(settled, timeout=90, message="the workload to settle")
        # Operator actions meanwhile: a cancel, a replay (its job runs and dies again).
        later = c.execute("SELECT id FROM jobs WHERE payload ->> 'key' = 'later0'").fetchone()["id"]
        jobqueue.cancel(c, later)
        dead = c.execute("SELECT id FROM jobs WHERE type = 'test.permanent' AND status = 'dead' LIMIT 1"
                         ).fetchone()["id"]
        jobqueue.replay(c, dead, audit.Actor("test"), "fixed", None)
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE replay_of = %s AND status = 'dead'",
                                   (dead,)).fetchone()["n"] == 1, timeout=30, message="the replay to run")
    w.send_signal(signal.SIGTERM)
    w.wait(30)
    with connect(db_url) as c:
        # A worker that died holding jobs: the reaper takes them back.
        jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"lost{i}"}, tenants[0]) for i in range(4)])
        assert len(jobqueue.claim_batch(c, "default", "ghost", 4, 30)) == 4
        assert Reaper().run_once(c, now=t0 + timedelta(hours=2)) == 4
        Pruner(PrunerConfig(dead_retention_days=0)).run_once(c, now=t0 + timedelta(days=365))  # dead kept: counted below
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 0
        DepthSampler().run_once(c)
        assert metrics.depth_drift(c) == []
        kept = {r["status"]: int(r["n"]) for r in c.execute(
            "SELECT status::text AS status, sum(jobs) AS n FROM queue_depth GROUP BY status").fetchall()}
        counted = {r["status"]: int(r["n"]) for r in c.execute(
            "SELECT status::text AS status, count(*) AS n FROM jobs WHERE status IN ('pending', 'retryable', 'dead') "
            "GROUP BY status").fetchall()}
        assert kept == counted
        # Not a vacuous check: every counted status is there.
        assert counted["pending"] == 19 and counted["retryable"] == 4 + 20 and counted["dead"] == 20 + 20 + 20 + 1
        assert {r["status"]: int(r["jobs"]) for r in c.execute(
            "SELECT status::text AS status, jobs FROM queue_depth_totals WHERE jobs <> 0 AND type = 'test.record'"
        ).fetchall()} == {"pending": 19, "retryable": 4, "dead": 20}
