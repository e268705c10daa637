"""POST /api/v1/workflows (insert a DAG of jobs) and GET /api/v1/workflows/{id}, for the caller's tenant.

The same checks at the edge as ``POST /jobs``, task by task: public job types only, the payload as
the type's contract allows and screened for personal data, then the workflow's own checks
(duplicate names, unknown dependencies, cycles: 400 with their code) before anything is stored.
Idempotent with ``Idempotency-Key`` (the one helper of every create endpoint).
"""
from __future__ import annotations

from datetime import datetime

from ... import jobqueue, jobtypes
from ...auth import TenantScope
from ...jobqueue import workflows
from ..context import get_db
from .blueprint import bp
from .common import Problem, authenticate, correlation_id, field, json_object, only_fields, respond

#: Tasks one request may hold at most.
MAX_API_TASKS = 20_000
_TASK_FIELDS = {"name", "type", "version", "payload", "deps", "on_dep_failure", "queue", "priority", "max_attempts"}


def _iso(value):
    return value.isoformat() if isinstance(value, datetime) else value


def workflow_json(row: dict) -> dict:
    out = {"id": str(row["id"]), "name": row["name"], "kind": row["kind"], "state": row["state"],
           "created_at": _iso(row["created_at"]), "cancelled_at": _iso(row.get("cancelled_at")),
           "progress": {"done": row["tasks_done"], "total": row["tasks_total"], "failed": row["tasks_failed"]},
           "tasks": []}
    for t in row.get("tasks", []):
        out["tasks"].append({
            "id": str(t["id"]), "name": t["name"], "type": t["type"], "state": t["state"],
            "job_id": str(t["job_id"]) if t["job_id"] and t["job_status"] else None, "job_status": t["job_status"],
            "deps": t["dep_names"], "on_dep_failure": t["policy"], "last_error_code": t["last_error_code"],
            "sub_workflow_id": str(t["sub_workflow_id"]) if t["sub_workflow_id"] else None,
            "started_at": _iso(t["started_at"]), "finished_at": _iso(t["finished_at"]), "result": t["result"]})
    return out


def _task(raw, i: int, tenant_id, pii_mode: str) -> dict:
    where = f"tasks[{i}]"
    if not isinstance(raw, dict):
        raise Problem(400, "invalid_field", f"{where} must be an object.", where)
    unknown = sorted(set(raw) - _TASK_FIELDS)
    if unknown:
        raise Problem(400, "unknown_field", f"{where} has an unknown field: {unknown[0]}.", f"{where}.{unknown[0]}")
    t = {"name": field(raw, "name", str, max_length=200), "type": field(raw, "type", str, max_length=100),
         "version": field(raw, "version", int, required=False, default=1), "payload": field(raw, "payload", dict),
         "on_dep_failure": field(raw, "on_dep_failure", str, required=False, default="cancel", max_length=20),
         "queue": field(raw, "queue", str, required=False), "priority": field(raw, "priority", int, required=False),
         "max_attempts": field(raw, "max_attempts", int, required=False)}
    deps = raw.get("deps", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) and 0 < len(d) <= 200 for d in deps):
        raise Problem(400, "invalid_field", f"{where}.deps must be a list of task names.", f"{where}.deps")
    t["deps"] = deps
    try:
        jt = jobtypes.get(t["type"], t["version"])
        if not jt.public:
            raise Problem(422, "job_type_not_public", f"{t['type']} is enqueued by opsboard itself, not over the API.",
                          f"{where}.type")
        t["payload"], _ = jobtypes.screen_personal_data(jt, t["payload"], pii_mode)
        jobqueue.prepare_row(jobqueue.NewJob(t["type"], t["payload"], tenant_id, t["version"], priority=t["priority"],
                                             queue=t["queue"], max_attempts=t["max_attempts"]))
    except jobtypes.UnknownJobType as exc:
        raise Problem(422, exc.code, str(exc), f"{where}.type") from None
    except jobtypes.PersonalDataRefused as exc:
        raise Problem(422, exc.code, str(exc), f"{where}.payload") from None
    except jobtypes.JobTypeError as exc:
        raise Problem(422, exc.code, str(exc), f"{where}.payload") from None
    except ValueError as exc:
        raise Problem(422, "invalid_payload", f"payload cannot be stored ({type(exc).__name__})",
                      f"{where}.payload") from None
    return t


@bp.route("/workflows", methods=["POST"])
def create_workflow():
    key = authenticate()
    body = json_object()
    only_fields(body, {"name", "tasks", "correlation_id"})
    name = field(body, "name", str, max_length=200)
    raw_tasks = body.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise Problem(400, "invalid_field", "tasks must be a non-empty list.", "tasks")
    if len(raw_tasks) > MAX_API_TASKS:
        raise Problem(400, "too_many_tasks", f"a workflow holds at most {MAX_API_TASKS} tasks.", "tasks")
    pii_mode = key.get("pii_mode") or "refuse"
    tasks = [_task(raw, i, key["tenant_id"], pii_mode) for i, raw in enumerate(raw_tasks)]
    wf = workflows.Workflow(name)
    try:
        for t in tasks:
            wf.add(t["name"], t["type"], t["payload"], deps=t["deps"], on_dep_failure=t["on_dep_failure"],
                   version=t["version"], queue=t["queue"], priority=t["priority"], max_attempts=t["max_attempts"])
        wf.check()
    except workflows.WorkflowError as exc:
        raise Problem(400, exc.code, exc.message, "tasks") from None
    corr = correlation_id(body)
    queue = tasks[0]["queue"] or jobtypes.get(tasks[0]["type"], tasks[0]["version"]).policy.queue

    def work(conn):
        row = wf.insert(conn, tenant=key["tenant_id"], correlation_id=corr)
        got = workflows.get_workflow(conn, row["id"], TenantScope(all=False, ids=(key["tenant_id"],)))
        return 202, workflow_json(got)

    return respond(key, body, queue, work)


@bp.route("/workflows/<workflow_id>", methods=["GET"])
def get_workflow(workflow_id: str):
    key = authenticate()
    with get_db().connection() as conn:
        row = workflows.get_workflow(conn, workflow_id, TenantScope(all=False, ids=(key["tenant_id"],)))
    if row is None:
        raise Problem(404, "not_found", "No such workflow for this tenant.", "id")
    return workflow_json(row)
