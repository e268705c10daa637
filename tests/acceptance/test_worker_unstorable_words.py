"""No job's words stop a worker or hold another job's outcome (issue 51), through ``python -m worker``.

Handlers fail with texts PostgreSQL cannot store (a lone surrogate, a NUL, a surrogate-escaped reply,
a Permanent whose code and detail hold both) among plain jobs: every plain job succeeds exactly once,
every bad one ends dead after its attempts with a readable reason, and the worker stays up.
"""
from __future__ import annotations

import signal

from opsboard import auth, jobqueue
from opsboard.catalogue import activate
from opsboard.features import build_catalogue
from opsboard.jobqueue import NewJob
from tests.conftest import TEST_MODULES, connect, wait_for

MODULES = ",".join([*TEST_MODULES, "tests.support.unstorable_jobs"])
EFFECTS = "CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int)"


def test_bad_words_end_dead_with_a_readable_reason_and_plain_jobs_succeed_once(db_url, start_worker):
    activate(build_catalogue(modules=MODULES.split(",")))
    with connect(db_url) as c:
        c.execute(EFFECTS)
        t = auth.ensure_tenant(c, "words")["id"]
        says = ["surrogate", "nul", "escaped", "permanent"] * 2
        jobs = []
        for i in range(40):  # bad jobs spread among plain ones, so that batches mix them
            jobs.append(NewJob("unstorable.plain", {"key": f"k{i}"}, t))
            if i % 5 == 0 and says:
                jobs.append(NewJob("unstorable.bad", {"say": says.pop()}, t))
        ids = jobqueue.enqueue_many(c, jobs)
        bad = {i for i, j in zip(ids, jobs) if j.type == "unstorable.bad"}
        proc = start_worker(db_url, "--queues", "default=4", "--id", "w-words",
                            OPSBOARD_JOB_MODULES=MODULES, OPSBOARD_POLL_INTERVAL="0.2")

        def settled():
            rows = c.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status").fetchall()
            return {r["status"]: r["n"] for r in rows} == {"succeeded": 40, "dead": 8}
        wait_for(settled, timeout=60, interval=0.2, message="40 plain jobs succeeded and 8 bad ones dead")
        assert proc.poll() is None, proc.log_path.read_text()

        effects = c.execute("SELECT key, count(*) AS n FROM test_effects GROUP BY key").fetchall()
        assert len(effects) == 40 and all(r["n"] == 1 for r in effects)  # each plain job ran exactly once
        for row in c.execute("SELECT j.id, j.type, j.status, j.attempts, j.last_error_code, "
                             "(SELECT array_agg(a.detail ORDER BY a.attempt) FROM job_attempts a "
                             " WHERE a.job_id = j.id) AS details FROM jobs j WHERE j.id = ANY(%s)", (list(bad),)):
            assert row["status"] == "dead", row
            assert row["last_error_code"], row
            # Retried by count (2 attempts), except the Permanent, dead at once.
            assert row["attempts"] == (1 if "gone" in row["last_error_code"] else 2), row
            reason = " ".join(d or "" for d in row["details"])
            assert reason.strip() and "\ufffd" in reason + row["last_error_code"], row

    log = proc.log_path.read_text(errors="replace")
    assert "died" not in log and "Traceback" not in log, log
    assert "lease lost" not in log, log
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log
