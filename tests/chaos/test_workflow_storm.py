"""A SIGKILL storm through workflows and batches (issue 45): two `python -m worker` processes, one of
them SIGKILLed every few seconds while it holds running jobs and started again.

Afterwards every task ran and succeeded, every batch callback was made exactly once (one job per
callback task, whatever the kills) and the death callbacks were skipped, and no task waits on
dependencies that all finished.  Kept under a minute of run time (OPSBOARD_CHAOS_SCALE or --long
for more)."""
from __future__ import annotations

import random
import signal
import time

import pytest

from opsboard import auth
from opsboard.jobqueue import batches
from opsboard.jobqueue.workflows import Workflow
from tests.conftest import connect, wait_for

pytestmark = [pytest.mark.chaos]


def test_sigkill_storm_through_workflows_and_batches(db_url, start_worker, chaos_scale):
    rng = random.Random(45)
    fan = int(30 * chaos_scale)
    with connect(db_url) as c:
        c.execute("CREATE TABLE test_wf_runs (key text, job_id uuid, attempt int)")
        tenant = auth.ensure_tenant(c, "storm")["id"]
        wf_ids, batch_ids = [], []
        for w in range(3):
            wf = Workflow(f"storm-{w}").add("root", "wft.record", {"key": f"w{w}-root", "ms": 20})
            for i in range(fan):
                wf.add(f"t{i}", "wft.record", {"key": f"w{w}-t{i}", "ms": rng.choice((100, 300, 500))}, deps=["root"])
            inner = Workflow(f"storm-{w}-inner").add("x", "wft.record", {"key": f"w{w}-x", "ms": 50}).add(
                "y", "wft.record", {"key": f"w{w}-y", "ms": 50}, deps=["x"])
            wf.add_workflow("sub", inner, deps=[f"t{i}" for i in range(0, fan, 3)])
            wf.add("sink", "wft.record", {"key": f"w{w}-sink"}, deps=[f"t{i}" for i in range(fan)] + ["sub"])
            wf_ids.append(wf.insert(c, tenant=tenant)["id"])
        for b in range(3):
            members = [{"name": f"m{i}", "type": "wft.record", "payload": {"key": f"b{b}-m{i}", "ms": rng.choice((100, 400))}}
                       for i in range(fan)]
            members.append({"name": "grower", "type": "wft.grow", "payload": {"key": f"b{b}", "add": 3}})
            wf = batches.build(f"batch-{b}", members,
                               on_success={"type": "wft.record", "payload": {"key": f"b{b}-on_success"}},
                               on_complete={"type": "wft.record", "payload": {"key": f"b{b}-on_complete"}},
                               on_death={"type": "wft.record", "payload": {"key": f"b{b}-on_death"}})
            batch_ids.append(wf.insert(c, tenant=tenant)["id"])

    env = {"OPSBOARD_LEASE_SECONDS": "2"}
    workers = {n: start_worker(db_url, "--queues", "default=3", "--id", n, **env) for n in ("s1", "s2")}
    kills = 0
    deadline = time.monotonic() + 25 * chaos_scale
    with connect(db_url) as c:
        def open_tasks() -> int:
            return c.execute("SELECT count(*) AS n FROM workflow_tasks WHERE state IN ('waiting', 'ready')"
                             ).fetchone()["n"]

        while time.monotonic() < deadline and open_tasks() > 0:
            name = rng.choice(sorted(workers))
            holding = c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running' AND locked_by LIKE %s",
                                (f"{name}%",)).fetchone()["n"]
            if holding:
                workers[name].send_signal(signal.SIGKILL)
                workers[name].wait(10)
                kills += 1
                workers[name] = start_worker(db_url, "--queues", "default=3", "--id", f"{name}-{kills}", **env)
            time.sleep(rng.uniform(1.0, 2.0))
        assert kills >= 3, f"only {kills} kills: the storm did not happen"
        wait_for(lambda: open_tasks() == 0, timeout=90, interval=0.5, message="every task to finish after the storm")

        # Every task ran and succeeded; the death callbacks had nothing to do.
        states = {r["state"]: r["n"] for r in c.execute(
            "SELECT state, count(*) AS n FROM workflow_tasks GROUP BY state")}
        assert states == {"succeeded": sum(states.values()) - 3, "skipped": 3}, states
        skipped = {r["name"] for r in c.execute("SELECT name FROM workflow_tasks WHERE state = 'skipped'")}
        assert skipped == {"on_death"}
        # Every job task's key ran at least once (a run killed midway runs again: its handler is idempotent).
        ran = {r["key"] for r in c.execute("SELECT DISTINCT key FROM test_wf_runs")}
        expected = {f"w{w}-{k}" for w in range(3) for k in ["root", "x", "y", "sink", *(f"t{i}" for i in range(fan))]}
        expected |= {f"b{b}-m{i}" for b in range(3) for i in range(fan)}
        expected |= {f"b{b}-{cb}" for b in range(3) for cb in ("on_success", "on_complete")}
        assert expected <= ran, sorted(expected - ran)[:10]
        # Each callback was made exactly once: one job per callback task, one job id among its runs.
        for b in range(3):
            for cb in ("on_success", "on_complete"):
                jobs = c.execute("SELECT count(DISTINCT job_id) AS n FROM test_wf_runs WHERE key = %s",
                                 (f"b{b}-{cb}",)).fetchone()["n"]
                assert jobs == 1, (b, cb, jobs)
        made = c.execute("""SELECT t.name, count(j.id) AS n FROM workflow_tasks t
                            LEFT JOIN jobs j ON j.idempotency_key = 'wf:' || t.id
                            WHERE t.name IN ('on_success', 'on_complete', 'on_death') GROUP BY t.id, t.name""").fetchall()
        assert sorted((r["name"], r["n"]) for r in made) == sorted(
            [("on_success", 1)] * 3 + [("on_complete", 1)] * 3 + [("on_death", 0)] * 3)
        # The grown members are in their batches' progress.
        for bid in batch_ids:
            p = batches.progress(c, bid)
            assert (p["done"], p["total"]) == (fan + 4, fan + 4), p
        # No task waits on dependencies that all finished.
        assert c.execute("""SELECT count(*) AS n FROM workflow_tasks t WHERE t.state = 'waiting'
                            AND NOT EXISTS (SELECT FROM workflow_deps d JOIN workflow_tasks dt ON dt.id = d.dep_id
                                            WHERE d.task_id = t.id AND dt.state IN ('waiting', 'ready'))""").fetchone()["n"] == 0
        for wid in wf_ids:
            assert c.execute("SELECT count(*) AS n FROM workflow_tasks WHERE workflow_id = %s AND state <> 'succeeded'",
                             (wid,)).fetchone()["n"] == 0
