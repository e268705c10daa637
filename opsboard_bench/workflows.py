"""The ``workflows`` scenario (issue 45): no-op jobs with dependencies, drained by 2 worker processes.

In one run: the same machine's no-dependency rate (as ``process_2``), then three shapes inserted as
workflows of ``diag.noop`` tasks: ``fan_out_in`` (1 -> 10,000 -> 1), ``layers_20`` (20 layers of 500,
each task depending on 2 of the layer before) and ``chain_1000``.  Each shape's rate is its jobs over
the time from its first start to its last finish (job timestamps, the database's clock); ``stuck``
counts its tasks not finished once no job is left to run.

``dependent_start_p99_ms`` is the time from a task's last dependency's finish (its job's
``finished_at``, written by the completing transaction that releases the task) to the task's job's
start (``started_at``, its claim), over ``chain_1000``'s 999 dependent tasks: there a released task
has nothing ahead of it, so the figure is what a dependency costs.  In the fan-out and the layers, a
released task also waits behind its released siblings (up to 10,000 at once for 128 slots): that
queueing is printed beside it (``layers_20``'s p99) but is not the release's latency.

``--json FILE`` writes exactly::

    {"no_dependency_jobs_per_s": N, "dependent_start_p99_ms": N,
     "shapes": {"fan_out_in": {"jobs": N, "jobs_per_s": N, "stuck": 0}, "layers_20": {...}, "chain_1000": {...}}}
"""
from __future__ import annotations

import time

from opsboard import jobqueue
from opsboard.jobqueue.workflows import Workflow

from .harness import Bench, Goal, percentile
from .process import BENCH_QUEUES

WORKERS = 2


def _shape(name: str, fan: int = 10_000, layers: int = 20, width: int = 500, chain: int = 1000) -> Workflow:
    wf = Workflow(name)
    if name == "fan_out_in":
        wf.add("root", "diag.noop", {})
        for i in range(fan):
            wf.add(f"t{i}", "diag.noop", {}, deps=["root"])
        wf.add("sink", "diag.noop", {}, deps=[f"t{i}" for i in range(fan)])
    elif name == "layers_20":
        for layer in range(layers):
            for i in range(width):
                deps = [] if layer == 0 else [f"l{layer - 1}-{i}", f"l{layer - 1}-{(i + 1) % width}"]
                wf.add(f"l{layer}-{i}", "diag.noop", {}, deps=deps)
    else:
        for i in range(chain):
            wf.add(f"c{i}", "diag.noop", {}, deps=[] if i == 0 else [f"c{i - 1}"])
    return wf


def _wait_settled(b: Bench, wf_id, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with b.conn() as c:
        while time.monotonic() < deadline:
            open_ = c.execute("SELECT count(*) AS n FROM workflow_tasks WHERE workflow_id = %s "
                              "AND state IN ('waiting', 'ready')", (wf_id,)).fetchone()["n"]
            left = c.execute("SELECT count(*) AS n FROM jobs WHERE status IN ('pending', 'retryable', 'running')"
                             ).fetchone()["n"]
            if open_ == 0 or left == 0:
                # Nothing left to run: what is still open is stuck (give a last release a moment).
                if open_ == 0:
                    return
                time.sleep(1.0)
                if c.execute("SELECT count(*) AS n FROM jobs WHERE status IN ('pending', 'retryable', 'running')"
                             ).fetchone()["n"] == 0:
                    return
            time.sleep(0.1)


def _run_shape(b: Bench, name: str, tenant) -> tuple[dict, list[float]]:
    wf = _shape(name)
    with b.conn() as c:
        row = wf.insert(c, tenant=tenant)
        c.execute("ANALYZE workflow_tasks")
        c.execute("ANALYZE workflow_deps")
    b.start_workers(WORKERS, BENCH_QUEUES)
    _wait_settled(b, row["id"])
    b.stop_workers()
    with b.conn() as c:
        fig = c.execute("""SELECT count(j.id) AS jobs, extract(epoch FROM max(j.finished_at) - min(j.started_at)) AS secs,
                                  count(*) FILTER (WHERE t.state IN ('waiting', 'ready')) AS stuck
                           FROM workflow_tasks t LEFT JOIN jobs j ON j.id = t.job_id
                           WHERE t.workflow_id = %s""", (row["id"],)).fetchone()
        # Each dependent task: its start minus its last dependency's finish.
        waits = [r["ms"] for r in c.execute("""
            SELECT extract(epoch FROM j.started_at - max(dj.finished_at)) * 1000 AS ms
            FROM workflow_tasks t JOIN jobs j ON j.id = t.job_id
            JOIN workflow_deps d ON d.task_id = t.id JOIN workflow_tasks dt ON dt.id = d.dep_id
            JOIN jobs dj ON dj.id = dt.job_id
            WHERE t.workflow_id = %s
            GROUP BY t.id, j.started_at""", (row["id"],))]
    shape = {"jobs": int(fig["jobs"]), "jobs_per_s": round(fig["jobs"] / float(fig["secs"] or 1e-9), 1),
             "stuck": int(fig["stuck"])}
    b.add("workflows", f"{name}: jobs per second", shape["jobs_per_s"], "jobs/s",
          f"{shape['jobs']} jobs, {shape['stuck']} stuck")
    with b.conn() as c:
        c.execute("TRUNCATE workflows, workflow_tasks, workflow_deps CASCADE")
    b.reset()
    return shape, [float(w) for w in waits]


def run(b: Bench) -> None:
    n = b.jobs or 20_000
    [tenant] = b.tenants(1)
    with b.conn() as c:
        for i in range(0, n, 5000):
            with c.transaction():
                jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, tenant) for _ in range(i, min(n, i + 5000))])
        c.execute("VACUUM ANALYZE jobs")
    b.start_workers(WORKERS, BENCH_QUEUES)
    b.wait_done(n)
    b.stop_workers()
    with b.conn() as c:
        row = c.execute("SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs "
                        "FROM jobs WHERE status = 'succeeded'").fetchone()
    base = round(row["n"] / float(row["secs"]), 1)
    b.add("workflows", "no dependencies: jobs per second", base, "jobs/s", f"{n} diag.noop jobs, {WORKERS} workers")
    b.reset()
    shapes, waits = {}, {}
    for name in ("fan_out_in", "layers_20", "chain_1000"):
        shapes[name], waits[name] = _run_shape(b, name, tenant)
    for name in ("fan_out_in", "layers_20"):
        b.add("workflows", f"{name} / no-dependency rate", shapes[name]["jobs_per_s"] / base, "x",
              "goal: at least half", goal=Goal(">=", 0.5))
    p99 = round(percentile(waits["chain_1000"], 99), 2)
    b.add("workflows", "dependent start p99 (chain_1000)", p99, "ms",
          "last dependency's finish -> the task's start", goal=Goal("<=", 20))
    b.add("workflows", "dependent start p50 (chain_1000)", percentile(waits["chain_1000"], 50), "ms")
    b.add("workflows", "dependent start p99 (layers_20, with queueing)", percentile(waits["layers_20"], 99), "ms",
          "a released task waits behind its 500 siblings")
    b.add("workflows", "stuck tasks", sum(s["stuck"] for s in shapes.values()), "tasks", goal=Goal("<=", 0))
    b.document = {"no_dependency_jobs_per_s": base, "dependent_start_p99_ms": p99, "shapes": shapes}
