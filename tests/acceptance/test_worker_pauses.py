"""Pauses through real workers and the real CLI (issue 28).

Two ``python -m worker`` processes claim while a job type is held and released:
nothing of the held type starts later than a second after the hold committed,
everything runs once released, nothing is lost or run twice.  A worker started
after a hold obeys it.  The CLI's pause/resume/pauses commands and their exit codes.
"""
from __future__ import annotations

import signal

from opsboard import audit, auth, jobqueue, pauses
from opsboard.jobqueue import NewJob
from tests.acceptance.test_cli import assert_one_line_error, cli_env, run
from tests.conftest import TEST_MODULES, connect, wait_for

EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"
OPS = audit.Actor(label="ops@example.test")
N = 300


def test_a_pause_then_resume_while_two_workers_claim(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"r{i}", "ms": 20}, t) for i in range(N)])
        workers = [start_worker(db_url, "--queues", "default=4", "--id", f"w{i}") for i in range(2)]
        wait_for(lambda: n("SELECT count(*) AS n FROM test_effects") >= 20, timeout=60,
                 message="the workers to run some jobs")
        pauses.pause(c, OPS, "type", "test.record", "failing provider")
        held_at = c.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        # A job of another type enqueued after the hold runs: the fleet still claims.
        other = jobqueue.enqueue(c, "test.slow", {"key": "other", "ms": 1}, tenant=t)
        wait_for(lambda: jobqueue.get_job(c, other["id"])["status"] == "succeeded", timeout=30,
                 message="a job of another type to run during the hold")
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'running'") == 0, timeout=30,
                 message="running jobs to finish")
        late = n("SELECT count(*) AS n FROM jobs WHERE type = 'test.record' "
                 "AND started_at > %s + interval '1 second'", held_at)
        assert late == 0
        pending = n("SELECT count(*) AS n FROM jobs WHERE type = 'test.record' AND status = 'pending'")
        assert pending > 0, "the hold came too late to hold anything"
        assert n("SELECT count(*) AS n FROM jobs WHERE status = 'pending' AND attempts > 0") == 0
        pauses.resume(c, OPS, "type", "test.record", "provider back")
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded' AND type = 'test.record'") == N,
                 timeout=90, message="every job to run after the resume")
        assert n("SELECT count(DISTINCT key) AS n FROM test_effects WHERE key LIKE 'r%%'") == N
        assert n("SELECT count(*) AS n FROM test_effects WHERE key LIKE 'r%%'") == N  # none twice
        assert n("SELECT count(*) AS n FROM jobs WHERE attempts <> 1") == 0
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0


def test_a_worker_started_after_a_hold_obeys_it_and_the_cli_releases_it(db_url, start_worker):
    env = cli_env(db_url, OPSBOARD_JOB_MODULES=",".join(TEST_MODULES))
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        r = run("pause", "queue", "default", "--reason", "db maintenance", env=env)
        assert r.returncode == 0, r.stderr
        assert "paused queue default" in r.stdout
        jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"d{i}"}, t) for i in range(10)])
        w = start_worker(db_url, "--queues", "critical=1,default=2", "--id", "late")
        crit = jobqueue.enqueue(c, "test.record", {"key": "crit"}, tenant=t, version=2)
        wait_for(lambda: jobqueue.get_job(c, crit["id"])["status"] == "succeeded", timeout=60,
                 message="the late worker to run the critical job")
        assert n("SELECT count(*) AS n FROM jobs WHERE queue = 'default' AND status = 'pending' AND attempts = 0") == 10
        listed = run("pauses", env=env)
        assert listed.returncode == 0 and "queue" in listed.stdout and "db maintenance" in listed.stdout
        r = run("resume", "queue", "default", "--reason", "done", env=env)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == 11, timeout=30,
                 message="the released queue to run")
        actions = [(r["actor_label"], r["action"]) for r in
                   c.execute("SELECT actor_label, action FROM audit_log ORDER BY at, id").fetchall()]
        assert actions == [("cli", "pause"), ("cli", "resume")]
        w.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0


def test_pause_cli_bad_input_exits_2_with_one_line(db_url):
    env = cli_env(db_url, OPSBOARD_JOB_MODULES=",".join(TEST_MODULES))
    assert_one_line_error(run("pause", "queue", "nope", "--reason", "x", env=env), "no queue nope")
    assert_one_line_error(run("pause", "queue", "critical", "--reason", "x", env=env), "second confirmation")
    assert_one_line_error(run("pause", "type", "test.record", env=env), "--reason")
    assert_one_line_error(run("pause", "planet", "x", "--reason", "x", env=env), "invalid choice")
    assert_one_line_error(run("pause", "type", "test.record", "--reason", "x", "--until", "soon", env=env),
                          "ISO 8601")
    assert_one_line_error(run("pause", "queue", "bulk", "--reason", "x", "--until", "2000-01-01T00:00", env=env),
                          "future")
    assert_one_line_error(run("resume", "tenant", "nobody", "--reason", "x", env=env), "not paused")
    ok = run("pause", "queue", "critical", "--reason", "drill", "--confirm", "--until", "2999-01-01T00:00", env=env)
    assert ok.returncode == 0 and "until 2999-01-01" in ok.stdout, ok.stderr


def test_a_live_limit_binds_two_running_workers_within_a_second(db_url, start_worker):
    from tests.acceptance.test_fairness_workers import SPANS, _peak
    with connect(db_url) as c:
        c.execute(SPANS)
        t = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        workers = [start_worker(db_url, "--queues", "default=4", "--id", f"lim{i}") for i in range(2)]
        wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id LIKE 'lim%%'") == 2, timeout=30,
                 message="the workers to start")
        pauses.set_limit(c, OPS, "type", "test.limited", 1, "database is hot")   # the catalogue says 3
        # Due 1.5 s after the change: a claim can then no longer use holds read before it (the
        # promise is "within a second"), whatever moment each worker's last read was.
        due = c.execute("SELECT clock_timestamp() + interval '1.5 seconds' AS t").fetchone()["t"]
        jobqueue.enqueue_many(c, [NewJob("test.limited", {"key": f"l{i}", "ms": 80}, t, run_at=due)
                                  for i in range(12)])
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == 12, timeout=60,
                 message="the limited jobs to finish")
        assert _peak(c, ["test.limited"]) == 1
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0


def _peak_of(c, key_prefix: str) -> int:
    """Most test.span jobs whose key starts with ``key_prefix`` running at one instant."""
    return c.execute("""
        SELECT coalesce(max(n), 0) AS peak FROM (
          SELECT sum(d) OVER (ORDER BY at, d) AS n FROM (
            SELECT started_at AS at, 1 AS d FROM test_spans WHERE key LIKE %(p)s
            UNION ALL SELECT ended_at, -1 FROM test_spans WHERE key LIKE %(p)s) e) s""",
                     {"p": key_prefix + "%"}).fetchone()["peak"]


def test_a_live_slot_change_grows_and_shrinks_a_running_worker_and_binds_one_started_later(db_url, start_worker):
    from tests.acceptance.test_fairness_workers import SPANS
    with connect(db_url) as c:
        c.execute(SPANS)
        t = auth.ensure_tenant(c, "acme")["id"]
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        slots = lambda wid: c.execute("SELECT (queues->>'default')::int AS n FROM workers WHERE id = %s",
                                      (wid,)).fetchone()
        first = start_worker(db_url, "--queues", "default=1", "--id", "slots0")
        wait_for(lambda: slots("slots0"), timeout=30, message="the worker to start")

        def run_batch(prefix: str, count: int) -> int:
            # Due 1.5 s after the change: every worker has re-read by then (the promise is a second).
            due = c.execute("SELECT clock_timestamp() + interval '1.5 seconds' AS t").fetchone()["t"]
            jobqueue.enqueue_many(c, [NewJob("test.span", {"key": f"{prefix}{i}", "ms": 150}, t, run_at=due)
                                      for i in range(count)])
            wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded' "
                               "AND payload->>'key' LIKE %s", prefix + "%") == count,
                     timeout=60, message=f"batch {prefix} to finish")
            return _peak_of(c, prefix)

        pauses.set_limit(c, OPS, "queue", "default", 4, "backlog")
        assert run_batch("a", 16) == 4
        assert slots("slots0")["n"] == 4
        pauses.set_limit(c, OPS, "queue", "default", 2, "database is hot")
        assert run_batch("b", 10) == 2
        # A worker started now runs the live value, not its own --queues.
        later = start_worker(db_url, "--queues", "default=1", "--id", "slots1")
        wait_for(lambda: slots("slots1"), timeout=30, message="the later worker to start")
        assert slots("slots1")["n"] == 2
        pauses.set_limit(c, OPS, "queue", "default", None, "back to normal")
        wait_for(lambda: slots("slots0")["n"] == 1 and slots("slots1")["n"] == 1, timeout=5,
                 message="both workers to go back to their own setting")
        assert n("SELECT count(*) AS n FROM jobs WHERE attempts <> 1") == 0
        for w in (first, later):
            w.send_signal(signal.SIGTERM)
        for w in (first, later):
            assert w.wait(30) == 0


def test_a_tenants_live_concurrency_binds_two_running_workers_within_a_second(db_url, start_worker):
    from tests.acceptance.test_fairness_workers import SPANS
    with connect(db_url) as c:
        c.execute(SPANS)
        acme, other = auth.ensure_tenant(c, "acme"), auth.ensure_tenant(c, "other")
        n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
        workers = [start_worker(db_url, "--queues", "default=4", "--id", f"tc{i}") for i in range(2)]
        wait_for(lambda: n("SELECT count(*) AS n FROM workers WHERE id LIKE 'tc%%'") == 2, timeout=30,
                 message="the workers to start")
        pauses.set_tenant_limits(c, OPS, "acme", "bulk import floods", max_running=1)
        due = c.execute("SELECT clock_timestamp() + interval '1.5 seconds' AS t").fetchone()["t"]
        jobqueue.enqueue_many(c, [NewJob("test.span", {"key": f"{t['slug']}{i}", "ms": 80}, t["id"], run_at=due)
                                  for i in range(10) for t in (acme, other)])
        wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'") == 20, timeout=60,
                 message="the jobs to finish")
        assert _peak_of(c, "acme") == 1
        assert _peak_of(c, "other") > 1  # the other tenant is not held back
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0
