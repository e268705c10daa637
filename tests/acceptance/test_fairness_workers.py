"""Limits, reserved capacity and ordered groups with real worker processes."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from opsboard import auth, jobqueue
from tests.conftest import connect, wait_for
import tests.support.limits  # noqa: F401

SPANS = """CREATE TABLE test_spans (job_id uuid, key text, kind text, started_at timestamptz,
                                  ended_at timestamptz)"""
EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"
MODULES = {"OPSBOARD_JOB_MODULES": "tests.support.jobs,tests.support.limits,opsboard.tools.demo_catalogue"}


def _peak(c, kinds) -> int:
    """Most spans of these kinds open at one instant."""
    return c.execute("""
        SELECT coalesce(max(n), 0) AS peak FROM (
          SELECT sum(d) OVER (ORDER BY at, d) AS n FROM (
            SELECT started_at AS at, 1 AS d FROM test_spans WHERE kind = ANY(%(k)s)
            UNION ALL SELECT ended_at, -1 FROM test_spans WHERE kind = ANY(%(k)s)) e) s""",
                     {"k": kinds}).fetchone()["peak"]


def test_type_and_provider_limits_hold_across_three_workers(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(SPANS)
        t = [auth.ensure_tenant(c, f"t{i}")["id"] for i in range(3)]
        jobs = ([jobqueue.NewJob("test.limited", {"key": "l", "ms": 60}, t[i % 3]) for i in range(30)]
                + [jobqueue.NewJob("test.sms_a" if i % 2 else "test.sms_b", {"key": "s", "ms": 60}, t[i % 3])
                   for i in range(20)])
        jobqueue.enqueue_many(c, jobs)
    for _ in range(3):
        start_worker(db_url, "--queues", "default=8", **MODULES)
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 50,
                 timeout=60, message="50 limited jobs to finish")
        assert c.execute("SELECT count(*) AS n FROM test_spans WHERE ended_at IS NOT NULL").fetchone()["n"] == 50
        assert _peak(c, ["test.limited"]) <= 3
        assert _peak(c, ["test.sms_a", "test.sms_b"]) <= 2
        # The limits were reached, not merely never approached.
        assert _peak(c, ["test.limited"]) == 3


def test_rate_limited_jobs_snooze_without_spending_attempts(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(SPANS)
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.rated", {"key": "r", "ms": 1}, t) for _ in range(30)])
    start_worker(db_url, "--queues", "default=8", **MODULES)
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 30,
                 timeout=30, message="rate-limited jobs to finish")
        # max_attempts is 1: a snooze that counted an attempt would have killed the job.
        assert c.execute("SELECT max(attempts) AS m FROM jobs").fetchone()["m"] == 1
        snoozed = c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'snoozed' "
                            "AND error_code = 'rate_limited'").fetchone()["n"]
        assert snoozed > 0
        spread = c.execute("SELECT extract(epoch FROM max(started_at) - min(started_at)) AS s FROM test_spans"
                           ).fetchone()["s"]
        # burst 5 then 20/s: 30 jobs need at least (30 - 5) / 20 s.
        assert float(spread) >= (30 - 5) / 20 * 0.9


def test_critical_slots_run_at_once_while_default_is_busy(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.slow", {"key": "bg", "ms": 20000}, t) for _ in range(6)])
    start_worker(db_url, "--queues", "critical=1,default=2", OPSBOARD_SHUTDOWN_GRACE_SECONDS=0)
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"] == 2,
                 message="default slots busy")
        otp = jobqueue.enqueue(c, "test.record", {"key": "otp"}, version=2, tenant=t)
        row = wait_for(lambda: c.execute("SELECT status, started_at - created_at AS wait FROM jobs WHERE id = %s",
                                         (otp["id"],)).fetchone() if c.execute(
            "SELECT status FROM jobs WHERE id = %s", (otp["id"],)).fetchone()["status"] == "succeeded" else None,
                       timeout=10, message="the critical job to run")
        assert row["wait"].total_seconds() < 2
        # The default queue is still stuck on its slow jobs: the critical slot was its own.
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE type = 'test.slow' AND status = 'pending'"
                         ).fetchone()["n"] == 4


def test_ordered_groups_with_two_workers(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        jobs = []
        for i in range(20):
            jobs.append(jobqueue.NewJob("test.record", {"key": f"g{i:02d}", "ms": 5}, t, group_key="order-42"))
            jobs.append(jobqueue.NewJob("test.record", {"key": f"x{i:02d}", "ms": 5}, t))
        jobqueue.enqueue_many(c, jobs)
    start_worker(db_url, "--queues", "default=4")
    start_worker(db_url, "--queues", "default=4")
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 40,
                 message="40 jobs")
        rows = c.execute("SELECT e.key, j.started_at, j.finished_at FROM test_effects e JOIN jobs j ON j.id = e.job_id "
                         "WHERE e.key LIKE 'g%%' ORDER BY j.started_at").fetchall()
        assert [r["key"] for r in rows] == [f"g{i:02d}" for i in range(20)]
        for a, b in zip(rows, rows[1:]):
            assert a["finished_at"] <= b["started_at"], "two jobs of one group overlapped"


def test_metrics_endpoint_parses(app, client, login_as):
    with connect(app.extensions["test_db_url"]) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(7)])
        from worker.services.depth import DepthSampler
        DepthSampler().run_once(c)
    assert client.get("/metrics").status_code == 401
    login_as("ops")
    r = client.get("/metrics")
    assert r.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(r.get_data(as_text=True))}
    assert {"opsboard_jobs", "opsboard_queue_oldest_ready_seconds", "opsboard_jobs_completed",
            "opsboard_workers"} <= set(families)
    pending = [s.value for s in families["opsboard_jobs"].samples
               if s.labels == {"queue": "default", "type": "diag.noop", "status": "pending"}]
    assert pending == [7.0]


def test_metrics_bearer_token(db_url):
    from opsboard.web.app import create_app
    from opsboard.db import Database
    from tests.conftest import make_config
    database = Database(db_url).open()
    try:
        app = create_app({"OPSBOARD": make_config(database_url=db_url, metrics_token="s3cret-token"),
                          "DATABASE": database})
        client = app.test_client()
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    finally:
        database.close()


def test_limited_and_grouped_work_does_not_wait_for_the_poll(db_url, start_worker):
    """A finished job of a limited type, or of an ordered group, wakes the claimers at once.

    With a 60 s poll interval, jobs that could only start after another one
    finished would take minutes if the worker waited for its poll.
    """
    with connect(db_url) as c:
        c.execute(SPANS)
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("test.sms_a", {"key": "s", "ms": 20}, t) for _ in range(8)]
                           + [jobqueue.NewJob("test.record", {"key": f"g{i}"}, t, group_key="g") for i in range(8)])
    start_worker(db_url, "--queues", "default=4", OPSBOARD_POLL_INTERVAL=60, **MODULES)
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'succeeded'").fetchone()["n"] == 16,
                 timeout=30, message="limited and grouped jobs to finish without polling")
        assert _peak(c, ["test.sms_a"]) <= 2
