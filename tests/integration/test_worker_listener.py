"""The listener's channel: an enqueue notifies only when its transaction commits."""
import psycopg

from opsboard import auth, queue
from opsboard.schema import JOBS_CHANNEL
from tests.conftest import connect


def test_enqueue_in_a_rolled_back_transaction_leaves_no_job_and_sends_nothing(db_url):
    listener = psycopg.connect(db_url, autocommit=True)
    try:
        listener.execute(f"LISTEN {JOBS_CHANNEL}")
        with connect(db_url) as c:
            t = auth.ensure_tenant(c, "acme")["id"]
            with c.transaction(force_rollback=True):
                job = queue.enqueue(c, "diag.noop", {}, tenant=t)
                assert queue.get_job(c, job["id"]) is not None  # visible inside the transaction
            assert queue.get_job(c, job["id"]) is None
            assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
        assert [n.payload for n in listener.notifies(timeout=1.0)] == []
        # The same enqueue committed does notify (so the check above can fail).
        with connect(db_url) as c:
            with c.transaction():
                queue.enqueue(c, "diag.noop", {}, tenant=t)
        got = []
        for n in listener.notifies(timeout=5.0):
            got.append(n.payload)
            break
        assert got == ["default"]
    finally:
        listener.close()
