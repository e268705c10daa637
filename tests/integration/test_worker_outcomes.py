"""The worker's completer: one refused outcome does not hold back the rest of its batch."""
from datetime import datetime, timezone

from opsboard import auth, jobqueue
from tests.conftest import connect, make_config
from worker.runner import Worker


def test_refused_record_is_isolated(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(3)])
    w = Worker(make_config(database_url=db_url), db_url, queues={"default": 1}, worker_id="w-test")
    w.pool.open(wait=True)
    try:
        with w.pool.connection() as conn:
            rows = jobqueue.claim_batch(conn, "default", w.id, 3, 30)
        now = datetime.now(timezone.utc)
        good = [jobqueue.OutcomeRecord(r["id"], r["attempts"], "succeeded", now) for r in rows[:2]]
        # An outcome kind the attempts table refuses (CHECK constraint): the whole statement fails.
        bad = jobqueue.OutcomeRecord(rows[2]["id"], rows[2]["attempts"], "exploded", now)
        w.completer.write_outcomes([(good[0], "default", "diag.noop", False), (bad, "default", "diag.noop", False),
                           (good[1], "default", "diag.noop", False)])
        with connect(db_url) as c:
            status = {r["id"]: r["status"] for r in c.execute("SELECT id, status FROM jobs")}
        assert status[rows[0]["id"]] == status[rows[1]["id"]] == "succeeded"
        assert status[rows[2]["id"]] == "running"  # left to the lease reaper
        assert w.stats.take(w.id)[0]["succeeded"] == 2
    finally:
        w.pool.close()
