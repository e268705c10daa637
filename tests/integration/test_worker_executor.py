"""The executor: a handler past its timeout is recorded as ``timeout`` on every attempt."""
from opsboard import auth, jobqueue
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker


def test_handler_past_its_timeout_is_recorded_as_timeout(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        # test.hang ignores cancellation and runs 3 s; its timeout is 0.5 s, 2 attempts.
        [job_id] = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.hang", {}, t)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-exec",
               run_services=False).start()
    try:
        with connect(db_url) as c:
            wait_for(lambda: jobqueue.get_job(c, job_id)["status"] == "dead", timeout=20, message="the job to die")
            j = jobqueue.get_job(c, job_id)
            assert (j["last_error_code"], j["attempts"]) == ("timeout", 2)
            assert [(a["attempt"], a["outcome"], a["error_code"]) for a in jobqueue.attempts(c, job_id)] == \
                [(1, "retryable", "timeout"), (2, "dead", "timeout")]
        # The hung thread was retired and the queue got a fresh slot each time.
        assert sum(1 for s in w.queues["default"].threads if not s.retired) == 1
    finally:
        w.stop()
        w.shutdown()


def test_abandoned_threads_are_capped_and_shown(db_url, app, client, login_as):
    from opsboard import metrics

    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        # Each ignores cancellation for 3 s past a 0.5 s timeout.
        ids = jobqueue.enqueue_many(c, [jobqueue.NewJob("test.hang", {}, t, max_attempts=1) for _ in range(3)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-cap",
               run_services=False).start()
    qs = w.queues["default"]
    try:
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'dead'",
                                       (ids,)).fetchone()["n"] >= 2, timeout=20, message="two timeouts")
            # One abandoned thread (the cap for a 1-slot queue) got a replacement;
            # the second timed-out slot stays taken instead of a third thread.
            assert qs.abandoned == 1
            assert sum(1 for s in qs.threads if s.is_alive()) <= 2
            w.keeper.heartbeat(w.running_jobs())
            row = c.execute("SELECT abandoned_threads FROM workers WHERE id = 'w-cap'").fetchone()
            assert row["abandoned_threads"] == {"default": 1}
        from opsboard.db import Database
        database = Database(db_url).open()
        try:
            text = metrics.prometheus_text(database).decode()
        finally:
            database.close()
        assert 'opsboard_worker_abandoned_threads{queue="default",worker="w-cap"} 1.0' in text
        login_as("ops")
        part = client.get("/workers/_list", headers={"HX-Request": "true"}).get_data(as_text=True)
        assert 'data-abandoned="default"' in part and "1 abandoned in default" in part
        with connect(db_url) as c:
            wait_for(lambda: c.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'dead'",
                                       (ids,)).fetchone()["n"] == 3, timeout=20, message="all three timeouts")
        # The hung handlers return (3 s): the abandoned thread ends.
        wait_for(lambda: qs.abandoned == 0, timeout=20, message="the abandoned thread to end")
    finally:
        w.stop()
        w.shutdown()
