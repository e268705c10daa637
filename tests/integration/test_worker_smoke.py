import uuid

from opsboard import auth, jobqueue
from tests.conftest import connect, wait_for

EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, at timestamptz DEFAULT clock_timestamp())"


def test_worker_processes_enqueued_jobs(db_url, start_worker):
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "acme")
        ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.record", {"key": f"k{i}"}, t["id"]) for i in range(50)])
    w = start_worker(db_url, "--queues", "default=4,critical=1")
    with connect(db_url) as c:
        wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE status='succeeded'").fetchone()["n"] == 50,
                 message="50 jobs to succeed")
        assert c.execute("SELECT count(*) AS n FROM test_effects").fetchone()["n"] == 50
        assert c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome='succeeded'").fetchone()["n"] == 50
    w.terminate()
    assert w.wait(20) == 0
