"""Report handlers: plan a run into its workflow, write one chunk, assemble the CSV, start a schedule slot's run.

Each validates its payload (the registry already did), calls one function of
:mod:`opsboard.reports` and lets the worker record the outcome.  All steps are
idempotent: a retry, or a worker killed mid-way, ends in the same one file.
"""
from __future__ import annotations

import functools
import uuid

from opsboard import reports, retry, storage
from opsboard.config import Config


@functools.lru_cache(maxsize=1)
def _config() -> Config:
    return Config.from_env()


def _store() -> storage.Storage:
    return storage.from_config(_config())


def _run_id(job) -> uuid.UUID:
    try:
        return uuid.UUID(job.payload["run_id"])
    except ValueError:
        raise retry.Permanent("invalid_run_id") from None


def _refuse(exc: reports.ReportError):
    # A run or chunk that does not exist will not appear on a retry.
    if exc.code in ("not_found", "unknown_report_kind"):
        return retry.Permanent(exc.code, detail=str(exc))
    return retry.Retryable(exc.code, detail=str(exc))


#: A chunk or an assembly that the previous release enqueued outside a workflow (migration 0090): its
#: run fails (the dead job's trigger) and is requested again.
_REPLANNED = retry.Permanent("report_replanned", detail="this report run was planned by the previous release; "
                                                        "request it again")


def request(job):
    """Plan the run into slices: insert its workflow (a chunk task per slice, the assembly after them)."""
    try:
        with job.connection() as conn:
            reports.plan_run(conn, _run_id(job), max_rows=_config().report_chunk_rows)
    except reports.ReportError as exc:
        return _refuse(exc)
    return None


def chunk(job):
    """Write one slice (a task of the run's workflow); its result ``{"rows", "part_key"}`` is what
    the assembly reads."""
    p = job.payload
    if "lower" not in p or job.workflow_task_id is None:
        return _REPLANNED
    try:
        with job.connection() as conn:
            return reports.run_chunk(conn, _store(), _run_id(job), int(p["seq"]), p["lower"], p.get("upper"),
                                     cancelled=job.cancelled)
    except reports.ReportError as exc:
        return _refuse(exc)


def assemble(job):
    """Stream the parts, its dependencies' results, into the final CSV; the run is ready."""
    if job.workflow_task_id is None:
        return _REPLANNED
    try:
        parts = job.dependency_results()
        with job.connection() as conn:
            reports.assemble_run(conn, _store(), _run_id(job), parts)
    except reports.ReportError as exc:
        return _refuse(exc)
    return None


def scheduled(job):
    """A schedule slot for this tenant: make its run (once per slot) and enqueue its request job."""
    p = job.payload
    try:
        with job.connection() as conn:
            run = reports.start_scheduled(conn, job.tenant_id, p["kind"], p["params"], p["source_key"],
                                          p["schedule"])
    except reports.ReportError as exc:
        return retry.Permanent(exc.code, detail=str(exc))
    return retry.Success(ref=str(run["id"]))
