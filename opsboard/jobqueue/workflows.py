"""Workflows: a DAG of jobs inserted atomically, each task released when its dependencies are done.

Build one with :class:`Workflow` and insert it in the caller's transaction::

    wf = Workflow("monthly-report")
    wf.add("fetch", "report.fetch", {"month": "2026-11"})
    for n in range(10):
        wf.add(f"chunk-{n}", "report.chunk", {"n": n}, deps=["fetch"])
    wf.add("assemble", "report.assemble", {}, deps=[f"chunk-{n}" for n in range(10)])
    row = wf.insert(conn, tenant=tenant_id)

Everything is checked before anything is written (:class:`WorkflowError`, a 400 with its code:
``duplicate_task``, ``unknown_dependency``, ``cycle``, ``invalid_policy``, ``too_many_tasks``, and a
job type's own payload validation).  A task's job is inserted only when the task is *released*: all
its dependencies succeeded, or (policy ``run``) finished whatever their outcome.  With the default
policy ``cancel``, a dependency that died or was cancelled cancels the task, and so on downstream.

How a task moves on (the tables and states are in migration 0078):

* the worker's completing transaction (:func:`opsboard.jobqueue.outcomes.record_outcomes`) finishes
  the tasks of a batch's jobs and releases their dependents, set-based for the whole batch
  (:func:`advance`); a job that is a task says so by its idempotency key ``wf:<task id>``, so
  that a batch without tasks runs no statement of this module;
* what finishes a job outside the completer (the lease reaper's last attempt, the expiry, an
  operator's cancel) is found by the leader's sweeper (:class:`WorkflowSweeper`);
* replaying a dead task (:func:`opsboard.jobqueue.replay`, audited) makes it ready again and brings
  back what its death cancelled (:func:`resume_task`).

A task reads its dependencies' results (:func:`dependency_results`; a handler through
``job.dependency_results()``).  A task may be a workflow (:meth:`Workflow.add_workflow`): its
tasks wait for the task's dependencies, and the task's dependents wait for all of them.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

import psycopg

from .. import audit, db, jobtypes
from ..auth import TenantScope
from ..errors import OpsError
from ..schema import new_id
from .enqueue import ALL_TENANTS, NewJob, prepare_row, tenant_id_of

#: What a dependency that died or was cancelled means for a task.
POLICIES = ("cancel", "run")
#: Tasks one insert may hold at most (sub-workflows included): a 10,000-task fan-out and room.
MAX_TASKS = 50_000
#: The idempotency-key prefix of a task's job.
TASK_KEY_PREFIX = "wf:"
#: A task's final states.
FINISHED = ("succeeded", "dead", "cancelled", "skipped")


class WorkflowError(OpsError):
    """A workflow refused before anything was stored (HTTP 400 with its code)."""

    def __init__(self, message: str, code: str, params: dict | None = None):
        super().__init__(message, code, status=400, params=params)


@dataclass
class Task:
    name: str
    type: str | None
    payload: dict | None
    deps: list[str]
    policy: str = "cancel"
    version: int = 1
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    sub: "Workflow | None" = None


@dataclass
class Workflow:
    """A DAG of named tasks, checked and inserted in one go (see the module's docstring)."""

    name: str
    kind: str = "workflow"
    tasks: dict[str, Task] = field(default_factory=dict)

    def add(self, name: str, job_type: str, payload: dict, *, deps: Iterable[str] = (),
            on_dep_failure: str = "cancel", version: int = 1, queue: str | None = None,
            priority: int | None = None, max_attempts: int | None = None) -> "Workflow":
        """Add a task running a job of ``job_type`` once ``deps`` (names) are done; returns ``self``."""
        self._add(Task(name, job_type, payload, list(deps), on_dep_failure, version, queue, priority, max_attempts))
        return self

    def add_workflow(self, name: str, sub: "Workflow", *, deps: Iterable[str] = (),
                     on_dep_failure: str = "cancel") -> "Workflow":
        """Add a task that is a whole workflow: its tasks start once ``deps`` are done, and this
        task's dependents wait for every one of them."""
        if not isinstance(sub, Workflow):
            raise WorkflowError("a sub-workflow must be a Workflow", "invalid_workflow")
        self._add(Task(name, None, None, list(deps), on_dep_failure, sub=sub))
        return self

    def _add(self, task: Task) -> None:
        if not isinstance(task.name, str) or not 0 < len(task.name) <= 200:
            raise WorkflowError("a task's name must be 1 to 200 characters", "invalid_task_name")
        if task.name in self.tasks:
            raise WorkflowError("two tasks are named %(name)s", "duplicate_task", {"name": task.name})
        if task.policy not in POLICIES and not (self.kind == "batch" and task.policy == "if_failed"):
            raise WorkflowError("on_dep_failure must be cancel or run, not %(policy)s", "invalid_policy",
                                {"policy": task.policy})
        if len(set(task.deps)) != len(task.deps):
            raise WorkflowError("task %(name)s names a dependency twice", "duplicate_dependency", {"name": task.name})
        self.tasks[task.name] = task

    def check(self) -> None:
        """Refuse unknown dependencies and cycles (here and in every sub-workflow)."""
        if not 0 < len(self.name) <= 200:
            raise WorkflowError("a workflow's name must be 1 to 200 characters", "invalid_workflow_name")
        if not self.tasks:
            raise WorkflowError("workflow %(name)s has no task", "empty_workflow", {"name": self.name})
        for t in self.tasks.values():
            for d in t.deps:
                if d not in self.tasks:
                    raise WorkflowError("task %(name)s depends on %(dep)s, which is not a task of %(workflow)s",
                                        "unknown_dependency", {"name": t.name, "dep": d, "workflow": self.name})
        # Kahn: what is left once no task without waiting dependencies remains is a cycle.
        left = {n: len(t.deps) for n, t in self.tasks.items()}
        dependents: dict[str, list[str]] = {n: [] for n in self.tasks}
        for t in self.tasks.values():
            for d in t.deps:
                dependents[d].append(t.name)
        ready = [n for n, k in left.items() if k == 0]
        seen = 0
        while ready:
            n = ready.pop()
            seen += 1
            for m in dependents[n]:
                left[m] -= 1
                if left[m] == 0:
                    ready.append(m)
        if seen != len(self.tasks):
            cycle = sorted(n for n, k in left.items() if k > 0)
            raise WorkflowError("the dependencies of %(tasks)s form a cycle", "cycle",
                                {"tasks": ", ".join(cycle[:10])})
        for t in self.tasks.values():
            if t.sub is not None:
                t.sub.check()

    def size(self) -> int:
        return sum(t.sub.size() + 1 if t.sub is not None else 1 for t in self.tasks.values())

    def insert(self, conn: psycopg.Connection, *, tenant, idempotency_key: str | None = None,
               correlation_id: str | None = None) -> dict:
        """Check, then insert the whole workflow in the caller's transaction and release its roots.

        With an ``idempotency_key`` a workflow of this tenant already holds, nothing is written and
        that workflow is returned (``created`` False).  Returns the workflow's row with ``tasks``
        (name -> task id) and ``created``."""
        self.check()
        if self.size() > MAX_TASKS:
            raise WorkflowError("a workflow holds at most %(most)s tasks", "too_many_tasks", {"most": MAX_TASKS})
        if idempotency_key is not None and not 0 < len(idempotency_key) <= 200:
            raise WorkflowError("idempotency_key must be 1 to 200 characters", "invalid_idempotency_key")
        tenant_id = tenant_id_of(tenant)
        flat = _Flat(tenant_id)
        wf_id = flat.add(self, None, idempotency_key, correlation_id)
        with conn.transaction():
            if idempotency_key is not None:
                # One insert per key: the second waits for the first's unique entry, then finds it.
                inserted = db.one(conn, "workflow_insert_keyed", {
                    "id": wf_id, "tenant_id": tenant_id, "name": self.name, "kind": self.kind,
                    "idempotency_key": idempotency_key, "correlation_id": correlation_id})
                if inserted is None:
                    existing = db.one(conn, "workflow_get_by_key", {"tenant_id": tenant_id,
                                                                    "idempotency_key": idempotency_key})
                    return {**existing, "tasks": None, "created": False}
                flat.workflows = flat.workflows[1:]
            if flat.workflows:
                db.execute(conn, "workflow_insert", {"rows": json.dumps(flat.workflows, default=str)})
            db.execute(conn, "workflow_task_insert_many", {"rows": json.dumps(flat.tasks, default=str)})
            if flat.edges:
                db.execute(conn, "workflow_dep_insert_many", {"deps": [e[0] for e in flat.edges],
                                                              "tasks": [e[1] for e in flat.edges]})
            release(conn, flat.roots)
        return {"id": wf_id, "tenant_id": tenant_id, "name": self.name, "kind": self.kind,
                "tasks": flat.names[wf_id], "created": True}


class _Flat:
    """A workflow and its sub-workflows as rows: workflows, tasks and edges, every job type checked."""

    def __init__(self, tenant_id: uuid.UUID):
        self.tenant_id = tenant_id
        self.workflows: list[dict] = []
        self.tasks: list[dict] = []
        self.edges: list[tuple[uuid.UUID, uuid.UUID]] = []
        self.roots: list[uuid.UUID] = []
        self.names: dict[uuid.UUID, dict[str, str]] = {}
        self.types: dict = {}
        #: Each workflow's tasks that nothing in it depends on (what a sub-workflow's dependents wait for).
        self.sinks: dict[uuid.UUID, list[uuid.UUID]] = {}

    def add(self, wf: Workflow, parent_id, idempotency_key=None, correlation_id=None,
            node: uuid.UUID | None = None) -> uuid.UUID:
        """Flatten ``wf``; ``node``: the parent's task that this workflow is (its roots wait for it).
        Returns the workflow's id; ``self.sinks[id]`` its tasks nothing depends on."""
        wf_id = new_id()
        self.workflows.append({"id": wf_id, "tenant_id": self.tenant_id, "name": wf.name, "kind": wf.kind,
                               "parent_id": parent_id, "idempotency_key": idempotency_key,
                               "correlation_id": correlation_id})
        ids = {name: new_id() for name in wf.tasks}
        self.names[wf_id] = {name: str(i) for name, i in ids.items()}
        # What a dependent of each task waits for: the task, or a sub-workflow's last tasks.
        waits_for: dict[str, list[uuid.UUID]] = {}
        has_dependents = {d for t in wf.tasks.values() for d in t.deps}
        subs: dict[str, uuid.UUID] = {}
        for name, t in wf.tasks.items():
            tid = ids[name]
            row = {"id": tid, "workflow_id": wf_id, "tenant_id": self.tenant_id, "name": name,
                   "policy": t.policy, "job_id": None, "type": None, "version": None, "queue": None,
                   "priority": None, "payload": None, "max_attempts": None, "sub_workflow_id": None}
            if t.sub is None:
                try:
                    job = prepare_row(NewJob(t.type, t.payload, self.tenant_id, t.version, priority=t.priority,
                                             queue=t.queue, max_attempts=t.max_attempts), self.types)
                except jobtypes.UnknownJobType as exc:
                    raise WorkflowError("task %(name)s: %(error)s", "unknown_job_type",
                                        {"name": name, "error": str(exc)}) from None
                except jobtypes.InvalidPayload as exc:
                    raise WorkflowError("task %(name)s: %(error)s", "invalid_payload",
                                        {"name": name, "error": str(exc)}) from None
                row.update(job_id=tid, type=job["type"], version=job["version"], queue=job["queue"],
                           priority=job["priority"], payload=t.payload, max_attempts=job["max_attempts"])
                waits_for[name] = [tid]
            self.tasks.append(row)
        for name, t in wf.tasks.items():
            if t.sub is not None:
                tid = ids[name]
                child = self.add(t.sub, wf_id, node=tid)
                subs[name] = child
                for row in self.tasks:
                    if row["id"] == tid:
                        row["sub_workflow_id"] = child
                        break
                waits_for[name] = self.sinks[child]
        for name, t in wf.tasks.items():
            tid = ids[name]
            deps = [d for dep in t.deps for d in waits_for[dep]]
            if node is not None and not t.deps:
                deps = [node]
            for d in deps:
                self.edges.append((d, tid))
            self._set_deps(tid, len(deps))
            if not deps:
                self.roots.append(tid)
        self.sinks[wf_id] = [d for name in wf.tasks if name not in has_dependents for d in waits_for[name]]
        return wf_id

    def _set_deps(self, tid: uuid.UUID, n: int) -> None:
        for row in reversed(self.tasks):
            if row["id"] == tid:
                row["deps"] = n
                return


def is_task_key(key: str | None) -> bool:
    """Whether a job's idempotency key says that the job is a workflow task."""
    return key is not None and key.startswith(TASK_KEY_PREFIX)


def task_id_of(key: str) -> uuid.UUID:
    return uuid.UUID(key[len(TASK_KEY_PREFIX):])


def release(conn: psycopg.Connection, task_ids: list) -> None:
    """Release the waiting tasks among ``task_ids`` that have nothing left to wait for, and follow
    whatever finishes at once (sub-workflow nodes, skipped callbacks) to its dependents."""
    if task_ids:
        advance(conn, [], ready=task_ids)


def advance(conn: psycopg.Connection, finished: list[tuple[Any, str]], *, ready: list | None = None,
            jobs_done: list[tuple[Any, Any, str]] | None = None) -> int:
    """Follow finished tasks ``(task id, state)`` to their dependents, in the caller's transaction:
    dependents count down and, with nothing left to wait for, are released, or are cancelled, in one
    statement (``workflow_release_dependents``); ``ready``: waiting tasks to release as they are (a
    workflow's roots); ``jobs_done``: ``(task id, job id, state)`` of tasks whose job finished, recorded
    by the same statement.  What that finishes (cancelled tasks, sub-workflow nodes, skipped callbacks)
    is followed in turn.  Returns the tasks of ``jobs_done`` that moved."""
    moved = 0
    if ready:
        rows = db.all_rows(conn, "workflow_task_release", {"ids": list(ready)})
        finished = [*finished, *((r["id"], r["state"]) for r in rows)]
    done = list(jobs_done or [])
    while finished or done:
        rows = db.all_rows(conn, "workflow_release_dependents", {
            "finish_ids": [d[0] for d in done], "finish_job_ids": [d[1] for d in done],
            "finish_states": [d[2] for d in done],
            "ids": [f[0] for f in finished], "states": [f[1] for f in finished]})
        moved += sum(1 for r in rows if r["finished"])
        done = []
        finished = [(r["id"], r["state"]) for r in rows if not r["finished"]]
    return moved


def finish_tasks(conn: psycopg.Connection, done: list[tuple[Any, Any, str]]) -> int:
    """Tasks whose jobs finished, ``(task id, job id, state)``: record each and follow it to its
    dependents (:func:`advance`, one statement for the usual batch).  Returns the tasks that moved."""
    if not done:
        return 0
    return advance(conn, [], jobs_done=done)


def dependency_results(conn: psycopg.Connection, task_id) -> dict[str, Any]:
    """A task's dependencies by name: each one's recorded result (``None`` when it returned none)."""
    return {r["name"]: r["result"] for r in db.all_rows(conn, "workflow_dependency_results", {"task_id": task_id})}


def workflow_state(row: dict) -> str:
    """running, succeeded, failed or cancelled, from a workflow row read by ``workflow_get``."""
    if row.get("cancelled_at") is not None:
        return "cancelled"
    if row["tasks_open"] > 0:
        return "running"
    return "failed" if row["tasks_failed"] > 0 else "succeeded"


def _uuid(value) -> uuid.UUID | None:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None


def get_workflow(conn: psycopg.Connection, workflow_id, scope: TenantScope = ALL_TENANTS, *,
                 task_limit: int = 20_000) -> dict | None:
    """A workflow in ``scope`` with its state, progress and tasks (each with its job's state)."""
    wid = _uuid(workflow_id)
    if wid is None:
        return None
    row = db.one(conn, "workflow_get", {"id": wid, **scope.params})
    if row is None:
        return None
    row["state"] = workflow_state(row)
    tasks = db.all_rows(conn, "workflow_task_list", {"id": wid, "limit": task_limit})
    names = {t["id"]: t["name"] for t in tasks}
    for t in tasks:
        t["dep_names"] = [names.get(d, str(d)) for d in t["deps"]]
    row["tasks"] = tasks
    return row


def list_workflows(conn: psycopg.Connection, scope: TenantScope, *, state: str | None = None,
                   tenant_id=None, kind: str | None = None, limit: int = 50) -> list[dict]:
    """Workflows in ``scope``, newest first, with their state and progress."""
    return db.all_rows(conn, "workflow_list", {**scope.params, "state": state, "tenant_id": tenant_id,
                                               "kind": kind, "limit": limit})


def cancel(conn: psycopg.Connection, workflow_id, actor: audit.Actor, reason: str, request_key: str | None, *,
           scope: TenantScope = ALL_TENANTS) -> dict:
    """Cancel a workflow and its sub-workflows, audited (``workflow.cancel``, a reason required,
    idempotent by ``request_key``): waiting tasks and jobs not started are cancelled; a running job
    runs on, and nothing after it runs."""
    wid = _uuid(workflow_id)
    if wid is None:
        raise OpsError("no such workflow", "not_found")

    def perform(ctx: audit.ActionContext) -> dict:
        wf = db.one(conn, "workflow_get", {"id": wid, **scope.params})
        if wf is None:
            raise OpsError("no such workflow", "not_found")
        state = workflow_state(wf)
        if state != "running":
            raise OpsError("only a running workflow can be cancelled; this one is %(state)s", "invalid_status",
                           params={"state": state})
        rows = db.all_rows(conn, "workflow_cancel", {"id": wid})
        advance(conn, [(r["id"], r["state"]) for r in rows])
        ctx.write(tenant_id=wf["tenant_id"], before={"state": state},
                  after={"state": "cancelled", "tasks_cancelled": len(rows)})
        return {"id": wid, "state": "cancelled", "tasks_cancelled": len(rows), "repeated": False}

    def repeat(previous: dict) -> dict:
        return {"id": wid, "state": "cancelled", **(previous["after"] or {}), "repeated": True}

    return audit.operator_action(conn, actor, "workflow.cancel", target_type="workflow", target_id=wid,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


def resume_task(conn: psycopg.Connection, dead_job: dict, new_job_id) -> list[str]:
    """A dead task's job was replayed (:func:`opsboard.jobqueue.replay`, which audits it): the task
    runs the replay's job, and the tasks its death cancelled wait again (those with another
    dependency still dead or cancelled stay cancelled).  Returns the ids of the tasks brought back."""
    task_id = task_id_of(dead_job["idempotency_key"])
    task = db.one(conn, "workflow_task_get", {"id": task_id})
    if task is None or task["state"] != "dead" or task["job_id"] != dead_job["id"]:
        return []
    if task["cancelled_at"] is not None:
        raise OpsError("this job's workflow was cancelled; it cannot be resumed", "workflow_cancelled")
    down = db.all_rows(conn, "workflow_task_downstream", {"id": task_id})
    candidates = {r["id"]: r for r in down if r["state"] == "cancelled" and r["cancel_cause"] == "dependency"}
    others = {d for r in candidates.values() for d in r["deps"] if d not in candidates and d != task_id}
    states = {r["id"]: r["state"] for r in db.all_rows(conn, "workflow_task_states", {"ids": list(others)})}
    states.update({r["id"]: r["state"] for r in down if r["id"] not in candidates})
    # Keep out what still has a dead or cancelled dependency, until nothing changes.
    back = set(candidates)
    changed = True
    while changed:
        changed = False
        for tid in list(back):
            for d in candidates[tid]["deps"]:
                if d == task_id or d in back:
                    continue
                if states.get(d) in ("dead", "cancelled"):
                    back.discard(tid)
                    changed = True
                    break
    db.execute(conn, "workflow_task_revive", {"task_id": task_id, "job_id": new_job_id,
                                              "ids": [task_id, *sorted(back)]})
    return [str(task_id), *(str(t) for t in sorted(back))]


class WorkflowSweeper:
    """The leader's sweeper: finishes the tasks whose jobs finished outside the completer (the lease
    reaper's dead, the expiry, an operator's cancel of one job) and releases what waited for them."""

    name = "workflow_sweeper"

    def __init__(self, interval: float = 5.0, batch: int = 1000):
        self.interval, self.batch = interval, batch

    def run_once(self, conn: psycopg.Connection, now: datetime | None = None) -> int:
        with conn.transaction():
            rows = db.all_rows(conn, "workflow_tasks_stranded", {"limit": self.batch})
            return finish_tasks(conn, [(r["id"], r["job_id"], r["state"]) for r in rows])


def register(cat) -> None:
    """The workflows' part of the catalogue: the leader's sweeper, and the dashboard's pages (the
    blueprint is named by its path: the core does not import the web)."""
    cat.services["workflow_sweeper"] = lambda config: WorkflowSweeper()
    cat.add_page("workflows", "opsboard.web.workflows:bp", endpoint="workflows.index", permission="jobs.view",
                 labels={"fa": "گردش‌کارها", "en": "Workflows"})
