"""The executor: a handler past its timeout is recorded as ``timeout`` on every attempt."""
from opsboard import auth, queue
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker


def test_handler_past_its_timeout_is_recorded_as_timeout(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        # test.hang ignores cancellation and runs 3 s; its timeout is 0.5 s, 2 attempts.
        [job_id] = queue.enqueue_many(c, [queue.NewJob("test.hang", {}, t)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-exec",
               run_services=False).start()
    try:
        with connect(db_url) as c:
            wait_for(lambda: queue.get_job(c, job_id)["status"] == "dead", timeout=20, message="the job to die")
            j = queue.get_job(c, job_id)
            assert (j["last_error_code"], j["attempts"]) == ("timeout", 2)
            assert [(a["attempt"], a["outcome"], a["error_code"]) for a in queue.attempts(c, job_id)] == \
                [(1, "retryable", "timeout"), (2, "dead", "timeout")]
        # The hung thread was retired and the queue got a fresh slot each time.
        assert sum(1 for s in w.queues["default"].threads if not s.retired) == 1
    finally:
        w.stop()
        w.shutdown()
