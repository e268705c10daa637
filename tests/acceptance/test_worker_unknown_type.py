"""A job whose type this worker does not know (rolling deploy) is given back, not killed."""
import uuid

from opsboard import auth
from opsboard.schema import new_id
from tests.conftest import connect, wait_for


def test_unknown_type_is_snoozed_without_spending_an_attempt(db_url, start_worker):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        job_id = new_id()
        # Written as a newer producer would: enqueue() itself refuses unknown types.
        c.execute("INSERT INTO jobs (id, type, version, tenant_id, queue, payload, max_attempts) "
                  "VALUES (%s, 'billing.invoice', 3, %s, 'default', '{}', 1)", (job_id, t))
    start_worker(db_url, "--queues", "default=2")
    with connect(db_url) as c:
        row = wait_for(lambda: c.execute(
            "SELECT j.status, j.attempts, j.last_error_code, j.available_at > now() + interval '30 seconds' AS later "
            "FROM jobs j WHERE j.id = %s AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = j.id)",
            (job_id,)).fetchone(), message="the worker to look at the job")
        assert (row["status"], row["attempts"], row["last_error_code"]) == ("pending", 0, "unknown_job_type")
        assert row["later"]
        outcomes = [r["outcome"] for r in c.execute("SELECT outcome FROM job_attempts WHERE job_id = %s", (job_id,))]
        assert outcomes == ["snoozed"]
