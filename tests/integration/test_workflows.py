"""Workflows, batches and recorded results (issue 45), through the real worker (executor and
completer in this process) on the real database."""
from __future__ import annotations

import threading
import time

import pytest

from opsboard import audit, auth, jobqueue
from opsboard.jobqueue import batches, results, workflows
from opsboard.jobqueue.workflows import Workflow, WorkflowError
from tests.conftest import connect, make_config, wait_for
from worker.runner import Worker

OPS = audit.Actor(label="ops@example.test")


@pytest.fixture
def tenant_id(db_url):
    with connect(db_url) as c:
        c.execute("CREATE TABLE IF NOT EXISTS test_wf_ok (key text PRIMARY KEY)")
        c.execute("CREATE TABLE IF NOT EXISTS test_wf_runs (key text, job_id uuid, attempt int)")
        return auth.ensure_tenant(c, "acme")["id"]


@pytest.fixture
def run_worker(db_url):
    started = []

    def start(**config):
        w = Worker(make_config(database_url=db_url, **config), db_url, queues={"default": 4}, worker_id=f"w-wf-{len(started)}",
                   run_services=False)
        w.start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()
        w.shutdown()


def _job(c, job_id):
    return c.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def _tasks(c, wf_id):
    wf = workflows.get_workflow(c, wf_id)
    return wf, {t["name"]: t for t in wf["tasks"]}


def _settled(db_url, wf_id, timeout=30):
    with connect(db_url) as c:
        return wait_for(lambda: (lambda wf: wf if wf["state"] != "running" else None)(workflows.get_workflow(c, wf_id)),
                        timeout=timeout, message=f"workflow {wf_id} to settle")


# ---------------------------------------------------------------- recorded results

def test_a_handler_result_is_stored_with_its_job_and_none_writes_nothing(db_url, tenant_id, run_worker):
    with connect(db_url) as c:
        with_result = jobqueue.enqueue(c, "wft.echo", {"value": {"rows": 3, "name": "گزارش"}}, tenant=tenant_id)
        without = jobqueue.enqueue(c, "wft.echo", {}, tenant=tenant_id)
    run_worker()
    with connect(db_url) as c:
        wait_for(lambda: _job(c, with_result["id"])["status"] == "succeeded" and _job(c, without["id"])["status"] == "succeeded")
        assert _job(c, with_result["id"])["result"] == {"rows": 3, "name": "گزارش"}
        assert _job(c, without["id"])["result"] is None


def test_a_result_past_the_limit_fails_as_result_too_large(db_url, tenant_id, run_worker):
    with connect(db_url) as c:
        big = jobqueue.enqueue(c, "wft.echo", {"value": "x" * 200}, tenant=tenant_id)
        small = jobqueue.enqueue(c, "wft.echo", {"value": "x" * 20}, tenant=tenant_id)
    run_worker(job_result_max_bytes=100)
    with connect(db_url) as c:
        wait_for(lambda: _job(c, big["id"])["status"] == "dead" and _job(c, small["id"])["status"] == "succeeded")
        row = _job(c, big["id"])
        assert row["last_error_code"] == "result_too_large" and row["result"] is None
        assert _job(c, small["id"])["result"] == "x" * 20


def test_a_producer_waits_for_a_result_and_is_woken_by_notify(db_url, tenant_id, run_worker):
    with connect(db_url) as c:
        job = jobqueue.enqueue(c, "wft.echo", {"value": 42, "ms": 300}, tenant=tenant_id)
    with connect(db_url) as c:
        assert results.wait(c, job["id"], timeout=0.05) is None  # not done yet: the timeout
    run_worker()
    waiter = connect(db_url)
    try:
        # poll=30: only the notification can end this wait in time.
        started = time.monotonic()
        row = results.wait(waiter, job["id"], timeout=20, poll=30)
        assert row is not None and row["status"] == "succeeded" and row["result"] == 42
        assert time.monotonic() - started < 10
    finally:
        waiter.close()


# ---------------------------------------------------------------- the builder refuses before storing

@pytest.mark.parametrize("build, code", [
    (lambda: Workflow("w").add("a", "wft.echo", {}).add("a", "wft.echo", {}), "duplicate_task"),
    (lambda: Workflow("w").add("a", "wft.echo", {}, deps=["nope"]), "unknown_dependency"),
    (lambda: Workflow("w").add("a", "wft.echo", {}, deps=["c"]).add("b", "wft.echo", {}, deps=["a"])
     .add("c", "wft.echo", {}, deps=["b"]).add("d", "wft.echo", {}), "cycle"),
    (lambda: Workflow("w").add("a", "wft.nope", {}), "unknown_job_type"),
    (lambda: Workflow("w").add("a", "wft.echo", {}, on_dep_failure="maybe"), "invalid_policy"),
    (lambda: Workflow("w").add_workflow("s", Workflow("inner").add("x", "wft.echo", {}, deps=["x"])), "cycle"),
])
def test_bad_workflows_are_refused_before_anything_is_stored(db_url, tenant_id, build, code):
    with connect(db_url) as c:
        with pytest.raises(WorkflowError) as err:
            build().insert(c, tenant=tenant_id)
        assert err.value.code == code
        assert c.execute("SELECT count(*) AS n FROM workflows").fetchone()["n"] == 0
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


# ---------------------------------------------------------------- running a DAG

def test_a_diamond_runs_in_order_and_the_fan_in_reads_its_dependencies_results(db_url, tenant_id, run_worker):
    wf = (Workflow("diamond").add("a", "wft.echo", {"value": 1})
          .add("b", "wft.echo", {"value": 10}, deps=["a"]).add("c", "wft.echo", {"value": 100}, deps=["a"])
          .add("d", "wft.total", {}, deps=["b", "c"]))
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        # Only the root is a job until it succeeds.
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1
        assert _job(c, row["tasks"]["a"])["status"] == "pending"
    run_worker()
    done = _settled(db_url, row["id"])
    assert done["state"] == "succeeded" and done["tasks_done"] == 4
    with connect(db_url) as c:
        _, tasks = _tasks(c, row["id"])
        assert _job(c, tasks["d"]["job_id"])["result"] == {"sum": 110, "deps": ["b", "c"]}
        # Each task started only after its dependencies finished.
        assert tasks["b"]["started_at"] >= tasks["a"]["job_finished_at"]
        assert tasks["d"]["started_at"] >= max(tasks["b"]["job_finished_at"], tasks["c"]["job_finished_at"])


def test_a_repeated_insert_with_the_same_key_returns_the_first(db_url, tenant_id):
    with connect(db_url) as c:
        first = Workflow("w").add("a", "wft.echo", {}).insert(c, tenant=tenant_id, idempotency_key="k1")
        again = Workflow("w").add("a", "wft.echo", {}).insert(c, tenant=tenant_id, idempotency_key="k1")
        assert first["created"] and not again["created"] and again["id"] == first["id"]
        assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_a_dead_dependency_cancels_downstream_or_runs_it_anyway_and_a_replay_resumes(db_url, tenant_id, run_worker):
    wf = (Workflow("policies").add("a", "wft.flaky", {"key": "a", "value": 5})
          .add("b", "wft.echo", {"value": 1}, deps=["a"])
          .add("c", "wft.echo", {"value": 2}, deps=["b"])
          .add("r", "wft.total", {}, deps=["a"], on_dep_failure="run"))
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
    run_worker()
    done = _settled(db_url, row["id"])
    assert done["state"] == "failed"
    with connect(db_url) as c:
        _, tasks = _tasks(c, row["id"])
        assert tasks["a"]["state"] == "dead"
        assert tasks["b"]["state"] == "cancelled" and tasks["c"]["state"] == "cancelled"
        assert tasks["b"]["job_id"] is not None and _job(c, tasks["b"]["job_id"]) is None  # never a job
        assert tasks["r"]["state"] == "succeeded"
        # Replay the dead task (audited, with a reason): the workflow resumes.
        c.execute("INSERT INTO test_wf_ok VALUES ('a')")
        replayed = jobqueue.replay(c, tasks["a"]["job_id"], OPS, "the upstream is back", None)
        audit_row = c.execute("SELECT * FROM audit_log WHERE action = 'job.replay'").fetchone()
        assert audit_row["reason"] == "the upstream is back"
        assert str(tasks["b"]["id"]) in audit_row["after"]["workflow_tasks_resumed"]
    done = _settled(db_url, row["id"])
    assert done["state"] == "succeeded"
    with connect(db_url) as c:
        _, tasks = _tasks(c, row["id"])
        assert tasks["a"]["job_id"] == replayed["id"]
        assert {n: t["state"] for n, t in tasks.items()} == {"a": "succeeded", "b": "succeeded", "c": "succeeded",
                                                             "r": "succeeded"}


def test_a_sub_workflow_runs_between_its_dependencies_and_its_dependents(db_url, tenant_id, run_worker):
    inner = Workflow("inner").add("x", "wft.echo", {"value": 2}).add("y", "wft.total", {}, deps=["x"])
    wf = (Workflow("outer").add("a", "wft.echo", {"value": 1}).add_workflow("sub", inner, deps=["a"])
          .add("z", "wft.total", {}, deps=["sub"]))
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        assert c.execute("SELECT count(*) AS n FROM workflows").fetchone()["n"] == 2
    run_worker()
    assert _settled(db_url, row["id"])["state"] == "succeeded"
    with connect(db_url) as c:
        wf_row, tasks = _tasks(c, row["id"])
        child = workflows.get_workflow(c, tasks["sub"]["sub_workflow_id"])
        ct = {t["name"]: t for t in child["tasks"]}
        assert child["state"] == "succeeded" and child["parent_id"] == row["id"]
        assert ct["x"]["started_at"] >= tasks["a"]["job_finished_at"]
        assert tasks["z"]["started_at"] >= ct["y"]["job_finished_at"]
        assert _job(c, tasks["z"]["job_id"])["result"] == {"sum": 2, "deps": ["y"]}


def test_cancelling_a_workflow_cancels_what_waits_and_what_has_not_started_audited(db_url, tenant_id):
    inner = Workflow("inner").add("x", "wft.echo", {})
    wf = Workflow("w").add("a", "wft.echo", {}).add("b", "wft.echo", {}, deps=["a"]).add_workflow("s", inner, deps=["b"])
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        with pytest.raises(Exception) as err:
            workflows.cancel(c, row["id"], OPS, "", None)
        assert getattr(err.value, "code", None) == "reason_required" or "reason" in str(err.value)
        out = workflows.cancel(c, row["id"], OPS, "wrong month", "req-1")
        again = workflows.cancel(c, row["id"], OPS, "wrong month", "req-1")
        assert out["tasks_cancelled"] == 4 and again["repeated"]  # a, b, the node s and its task x
        got = workflows.get_workflow(c, row["id"])
        assert got["state"] == "cancelled"
        assert {t["state"] for t in got["tasks"]} == {"cancelled"}
        assert _job(c, row["tasks"]["a"])["status"] == "cancelled"
        [node] = [t for t in got["tasks"] if t["name"] == "s"]
        assert workflows.get_workflow(c, node["sub_workflow_id"])["state"] == "cancelled"
        assert c.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'workflow.cancel'").fetchone()["n"] == 1
        with pytest.raises(Exception) as err:
            workflows.cancel(c, row["id"], OPS, "again", "req-2")
        assert err.value.code == "invalid_status"


def test_the_sweeper_follows_a_task_whose_job_was_cancelled_outside_the_completer(db_url, tenant_id):
    wf = Workflow("w").add("a", "wft.echo", {}).add("b", "wft.echo", {}, deps=["a"]).add(
        "c", "wft.echo", {}, deps=["a"], on_dep_failure="run")
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        jobqueue.cancel(c, row["tasks"]["a"], actor=OPS, reason="not needed")
        assert workflows.WorkflowSweeper().run_once(c) == 1
        assert workflows.WorkflowSweeper().run_once(c) == 0
        _, tasks = _tasks(c, row["id"])
        assert tasks["a"]["state"] == "cancelled" and tasks["b"]["state"] == "cancelled"
        assert tasks["c"]["state"] == "ready" and _job(c, tasks["c"]["job_id"])["status"] == "pending"


def test_tenant_scope_hides_another_tenants_workflow(db_url, tenant_id):
    with connect(db_url) as c:
        other = auth.ensure_tenant(c, "other")["id"]
        row = Workflow("w").add("a", "wft.echo", {}).insert(c, tenant=tenant_id)
        scope = auth.TenantScope(all=False, ids=(other,))
        assert workflows.get_workflow(c, row["id"], scope) is None
        assert workflows.list_workflows(c, scope) == []
        with pytest.raises(Exception) as err:
            workflows.cancel(c, row["id"], OPS, "not yours", None, scope=scope)
        assert err.value.code == "not_found"


# ---------------------------------------------------------------- batches

def test_a_batch_grows_from_a_member_and_fires_each_callback_once(db_url, tenant_id, run_worker):
    wf = batches.build("import", [
        {"name": "m1", "type": "wft.echo", "payload": {"value": 1}},
        {"name": "m2", "type": "wft.grow", "payload": {"key": "m2", "add": 2, "value": 2}},
    ], on_success={"type": "wft.record", "payload": {"key": "ok"}},
        on_complete={"type": "wft.record", "payload": {"key": "complete"}},
        on_death={"type": "wft.record", "payload": {"key": "death"}})
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        assert batches.progress(c, row["id"])["total"] == 2
    run_worker()
    assert _settled(db_url, row["id"])["state"] == "succeeded"
    with connect(db_url) as c:
        p = batches.progress(c, row["id"])
        assert (p["done"], p["total"], p["succeeded"]) == (4, 4, 4)
        assert p["callbacks"] == {"on_success": "succeeded", "on_complete": "succeeded", "on_death": "skipped"}
        runs = {r["key"]: r["n"] for r in c.execute("SELECT key, count(*) AS n FROM test_wf_runs GROUP BY key")}
        assert runs == {"ok": 1, "complete": 1}
        # The callbacks started after the grown members finished.
        _, tasks = _tasks(c, row["id"])
        assert tasks["on_success"]["started_at"] >= max(t["job_finished_at"] for n, t in tasks.items()
                                                         if n.startswith("m2-grown"))


def test_a_batch_with_a_dead_member_runs_its_completion_and_death_callbacks(db_url, tenant_id, run_worker):
    wf = batches.build("import", [{"type": "wft.echo", "payload": {}}, {"type": "wft.fail", "payload": {}}],
                       on_success={"type": "wft.record", "payload": {"key": "ok"}},
                       on_complete={"type": "wft.record", "payload": {"key": "complete"}},
                       on_death={"type": "wft.record", "payload": {"key": "death"}})
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
    run_worker()
    assert _settled(db_url, row["id"])["state"] == "failed"
    with connect(db_url) as c:
        p = batches.progress(c, row["id"])
        assert (p["done"], p["total"], p["failed"]) == (2, 2, 1)
        assert p["callbacks"] == {"on_success": "cancelled", "on_complete": "succeeded", "on_death": "succeeded"}
        runs = {r["key"]: r["n"] for r in c.execute("SELECT key, count(*) AS n FROM test_wf_runs GROUP BY key")}
        assert runs == {"complete": 1, "death": 1}


def test_a_closed_batch_takes_no_more_members(db_url, tenant_id):
    wf = batches.build("b", [{"name": "m", "type": "wft.echo", "payload": {}}],
                       on_complete={"type": "wft.echo", "payload": {}})
    with connect(db_url) as c:
        row = wf.insert(c, tenant=tenant_id)
        c.execute("UPDATE workflow_tasks SET state = 'ready' WHERE name = 'on_complete'")
        with pytest.raises(Exception) as err:
            batches.add_from_member(c, row["tasks"]["m"], [{"type": "wft.echo", "payload": {}}])
        assert err.value.code == "batch_closed"
