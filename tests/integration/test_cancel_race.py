"""A double-submitted cancel (two requests at the same moment) cancels once and answers both."""
import threading

import pytest

from opsboard import audit, auth, jobqueue
from opsboard.jobqueue import QueueError
from tests.conftest import connect


def test_concurrent_identical_cancels(db_url):
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        j = jobqueue.enqueue(c, "diag.noop", {}, tenant=t)
    results, errors = [], []
    barrier = threading.Barrier(2)

    def cancel():
        with connect(db_url) as c:
            barrier.wait()
            try:
                results.append(jobqueue.cancel(c, j["id"], actor=audit.Actor("ops@example.test"), reason="duplicate",
                                            request_key="same-click"))
            except QueueError as exc:
                errors.append(exc.code)

    threads = [threading.Thread(target=cancel) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert [r["status"] for r in results] == ["cancelled", "cancelled"]
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.cancel'").fetchone()["n"] == 1


def test_a_cancel_request_key_is_bound_to_its_job(conn, tenant):
    a = jobqueue.enqueue(conn, "diag.noop", {}, tenant=tenant["id"])
    b = jobqueue.enqueue(conn, "diag.noop", {}, tenant=tenant["id"])
    actor = audit.Actor("ops@example.test")
    jobqueue.cancel(conn, a["id"], actor=actor, reason="x", request_key="k")
    with pytest.raises(QueueError) as e:
        jobqueue.cancel(conn, b["id"], actor=actor, reason="x", request_key="k")
    assert e.value.code == "request_key_reused"
