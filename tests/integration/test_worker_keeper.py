"""The keeper (worker side): a job running longer than its lease keeps it by heartbeats."""
from opsboard import auth, jobqueue
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker
from worker.services.reaper import Reaper

EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"


def test_long_running_job_heartbeats_past_its_lease(db_url):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")["id"]
        # test.slow: timeout 30 s > lease / 2, so the keeper renews its lease.
        [job_id] = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.slow", {"key": "k", "ms": 5000}, t)])
    w = Worker(make_config(database_url=db_url, lease_seconds=2), db_url, queues={"default": 1},
               worker_id="w-keeper", run_services=False).start()
    try:
        with connect(db_url) as c:
            first = wait_for(lambda: c.execute("SELECT locked_until FROM jobs WHERE id = %s AND status = 'running'",
                                               (job_id,)).fetchone(), message="the job to start")["locked_until"]
            reaper, reaped, renewed = Reaper(), 0, set()

            def finished():
                nonlocal reaped
                reaped += reaper.run_once(c)  # real clock: a lease not renewed would expire here
                row = jobqueue.get_job(c, job_id)
                if row["status"] == "running":
                    renewed.add(row["locked_until"])
                return row["status"] != "running"

            wait_for(finished, timeout=20, interval=0.1, message="the job to finish")
            j = jobqueue.get_job(c, job_id)
            assert reaped == 0
            assert (j["status"], j["attempts"]) == ("succeeded", 1)
            assert (max(renewed) - first).total_seconds() >= 2.0, "the lease was never extended"
            assert [a["outcome"] for a in jobqueue.attempts(c, job_id)] == ["succeeded"]
    finally:
        w.stop()
        w.shutdown()
