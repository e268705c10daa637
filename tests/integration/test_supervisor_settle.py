"""After a crash the supervisor tells the jobs a worker ran from those it only
had claimed (its prefetch buffer), through the slots' running file."""
from opsboard import auth, jobqueue
from opsboard.config import Config
from opsboard.jobqueue import NewJob
from tests.conftest import connect
from worker.running_file import RunningFile, read_running
from worker.supervisor import Supervisor


def test_the_running_file_holds_what_the_slots_run(tmp_path):
    path = str(tmp_path / "w.running")
    rf = RunningFile(path, 2)
    a, b = rf.take_index(), rf.take_index()
    assert read_running(path) == set()
    import uuid
    j1, j2 = uuid.uuid4(), uuid.uuid4()
    rf.mark(a, j1)
    rf.mark(b, j2)
    rf.clear(a)
    assert read_running(path) == {j2}
    # One slot thread too many: nothing is certain any more.
    assert rf.take_index() is None
    assert read_running(path) is None
    assert read_running(str(tmp_path / "missing")) is None


def test_unstarted_jobs_go_back_at_once_and_the_one_running_is_the_suspect(db_url, tmp_path):
    sup = Supervisor(Config.from_env(), db_url, 1, [])
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ids = jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"k{i}"}, t) for i in range(5)])
        claimed = jobqueue.claim(c, "default", "w-dead", 5, 60).rows
        assert len(claimed) == 5
        ran = claimed[0]["id"]
        rf = RunningFile(sup.running_path("w-dead"), 4)
        rf.mark(rf.take_index(), ran)

        sup.settle("w-dead", "signal SIGKILL")

        j = jobqueue.get_job(c, ran)
        assert (j["status"], j["last_error_code"]) == ("retryable", "crashed_worker")
        assert [a["error_code"] for a in jobqueue.attempts(c, ran)] == ["crashed_worker"]
        for job_id in set(ids) - {ran}:
            j = jobqueue.get_job(c, job_id)
            # Pending again, uncounted, due now (no stagger), not a crash in its history.
            assert (j["status"], j["attempts"]) == ("pending", 0)
            assert c.execute("SELECT available_at <= now() AS due FROM jobs WHERE id = %s",
                             (job_id,)).fetchone()["due"]
            assert [(a["outcome"], a["error_code"]) for a in jobqueue.attempts(c, job_id)] == \
                [("released", "crash_unstarted")]


def test_without_a_running_file_every_held_job_counts_as_running(db_url):
    sup = Supervisor(Config.from_env(), db_url, 1, [])
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"k{i}"}, t) for i in range(3)])
        claimed = jobqueue.claim(c, "default", "w-old", 3, 60).rows
        sup.settle("w-old", "signal SIGKILL")
        codes = [jobqueue.attempts(c, r["id"])[0]["error_code"] for r in claimed]
        assert codes == ["crash_suspect"] * 3
        delayed = c.execute("SELECT count(*) AS n FROM jobs WHERE available_at > now() + interval '1 second'"
                            ).fetchone()["n"]
        assert delayed == 2  # staggered by rank: the first goes back at once
