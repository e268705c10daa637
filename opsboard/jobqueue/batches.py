"""Batches: a group of jobs with callbacks on success, on completion and on death.

A batch is a workflow (:mod:`opsboard.jobqueue.workflows`, kind ``batch``) whose members have no
dependencies and whose callbacks are tasks that depend on every member:

* ``on_success`` runs once every member succeeded (policy ``cancel``: a dead or cancelled member
  cancels it);
* ``on_complete`` runs once every member finished, whatever its outcome (policy ``run``);
* ``on_death`` runs once every member finished and at least one died or was cancelled (policy
  ``if_failed``; skipped otherwise).

Each callback runs exactly once, even when workers are killed: it is released by the transaction
that records its last member's outcome, guarded by its task's state (``waiting`` to ``ready``, one
transaction wins) and inserted with the fixed idempotency key ``wf:<callback task id>``.  A member
may add members to its own batch while the batch is open (a callback still waits):
:func:`add_from_member`, or ``job.add_to_batch`` in a handler.
"""
from __future__ import annotations

import json
from typing import Any

import psycopg

from .. import db
from ..auth import TenantScope
from ..errors import OpsError
from ..schema import new_id
from .enqueue import ALL_TENANTS, NewJob, prepare_row
from .workflows import Workflow, WorkflowError, get_workflow, release

#: The callbacks' task names and their policies.
CALLBACKS = {"on_success": "cancel", "on_complete": "run", "on_death": "if_failed"}


def build(name: str, members: list[dict], *, on_success: dict | None = None, on_complete: dict | None = None,
          on_death: dict | None = None) -> Workflow:
    """A batch as a workflow, ready for :meth:`Workflow.insert`.  ``members``: ``{"name" (optional),
    "type", "payload"}``; each callback: ``{"type", "payload"}``."""
    if not members:
        raise WorkflowError("a batch needs at least one member", "empty_batch")
    wf = Workflow(name, kind="batch")
    names = []
    for i, m in enumerate(members):
        mname = m.get("name") or f"member-{i + 1}"
        if mname in CALLBACKS:
            raise WorkflowError("%(name)s is the name of a callback", "invalid_task_name", {"name": mname})
        wf.add(mname, m["type"], m.get("payload") or {}, version=m.get("version", 1), queue=m.get("queue"),
               priority=m.get("priority"), max_attempts=m.get("max_attempts"))
        names.append(mname)
    for cb_name, cb in (("on_success", on_success), ("on_complete", on_complete), ("on_death", on_death)):
        if cb is not None:
            wf.add(cb_name, cb["type"], cb.get("payload") or {}, deps=names, on_dep_failure=CALLBACKS[cb_name],
                   version=cb.get("version", 1), queue=cb.get("queue"), max_attempts=cb.get("max_attempts"))
    return wf


def add_from_member(conn: psycopg.Connection, member_task_id, jobs: list[dict]) -> list[str]:
    """Add ``jobs`` (``{"name" (optional), "type", "payload"}``) to the batch of the running member
    ``member_task_id``, in the caller's transaction: each waiting callback waits for them too, and
    they are released at once.  Refused (``batch_closed``) once a callback no longer waits."""
    task = db.one(conn, "workflow_task_get", {"id": member_task_id})
    if task is None or task["kind"] != "batch":
        raise OpsError("this job is not a member of a batch", "not_a_batch")
    if task["cancelled_at"] is not None:
        raise OpsError("this batch was cancelled", "batch_closed")
    callbacks = db.all_rows(conn, "workflow_batch_callbacks_lock", {"id": task["workflow_id"]})
    waiting = [c["id"] for c in callbacks if c["state"] == "waiting"]
    if callbacks and not waiting:
        raise OpsError("this batch's callbacks have run; it takes no more members", "batch_closed")
    rows, ids, types = [], [], {}
    for m in jobs:
        try:
            job = prepare_row(NewJob(m["type"], m.get("payload") or {}, task["tenant_id"], m.get("version", 1),
                                     queue=m.get("queue"), priority=m.get("priority"),
                                     max_attempts=m.get("max_attempts")), types)
        except Exception as exc:  # unknown type or invalid payload: refused before anything is written
            raise WorkflowError("%(error)s", "invalid_task", {"error": str(exc)}) from None
        tid = new_id()
        name = m.get("name") or f"member-{tid}"
        if name in CALLBACKS:
            raise WorkflowError("%(name)s is the name of a callback", "invalid_task_name", {"name": name})
        rows.append({"id": str(tid), "workflow_id": str(task["workflow_id"]), "tenant_id": str(task["tenant_id"]),
                     "name": name, "job_id": str(tid), "type": job["type"], "version": job["version"],
                     "queue": job["queue"], "priority": job["priority"], "payload": m.get("payload") or {},
                     "max_attempts": job["max_attempts"], "sub_workflow_id": None, "policy": "cancel",
                     "deps": 0})
        ids.append(tid)
    if not rows:
        return []
    db.execute(conn, "workflow_task_insert_many", {"rows": json.dumps(rows)})
    if waiting:
        db.execute(conn, "workflow_batch_callbacks_extend", {"members": ids, "callbacks": waiting})
    release(conn, ids)
    return [str(i) for i in ids]


def progress(conn: psycopg.Connection, batch_id, scope: TenantScope = ALL_TENANTS) -> dict[str, Any] | None:
    """A batch's members done out of total, by state, and its callbacks' states."""
    wf = get_workflow(conn, batch_id, scope)
    if wf is None or wf["kind"] != "batch":
        return None
    members = [t for t in wf["tasks"] if t["name"] not in CALLBACKS]
    done = sum(1 for t in members if t["state"] in ("succeeded", "dead", "cancelled", "skipped"))
    return {"id": wf["id"], "state": wf["state"], "done": done, "total": len(members),
            "succeeded": sum(1 for t in members if t["state"] == "succeeded"),
            "failed": sum(1 for t in members if t["state"] in ("dead", "cancelled")),
            "callbacks": {t["name"]: t["state"] for t in wf["tasks"] if t["name"] in CALLBACKS}}
