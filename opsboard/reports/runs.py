"""Report runs: request (audited, idempotent), plan into chunks, write each chunk, assemble the file.
"""
from __future__ import annotations

import codecs
import csv
import io
import re
import shutil
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from .. import audit, db, jobqueue
from ..jobqueue.workflows import Workflow
from ..auth import TenantScope
from ..schema import new_id
from ..storage import Storage
from .kinds import get_kind, ReportError
from .csv_cells import csv_row


#: Source rows a chunk reads at most, unless configured (``OPSBOARD_REPORT_CHUNK_ROWS``).
DEFAULT_CHUNK_ROWS = 50_000


#: Rows fetched from the server per round trip while a chunk streams.
FETCH_ROWS = 2_000


BOM = codecs.BOM_UTF8


def request_report(conn: psycopg.Connection, tenant_id, kind: str, params: dict, actor: audit.Actor, *,
                   request_key: str | None = None, source_key: str | None = None) -> dict:
    """Create a run and enqueue its request job in one transaction; audited.

    Idempotent on ``request_key`` (a double submit returns the first run) and
    on ``source_key`` (a schedule slot makes one run per tenant).
    """
    k = get_kind(kind)
    clean = k.validate(dict(params or {}))
    with conn.transaction():
        if request_key:
            previous = audit.find_by_request_key(conn, "report.request", request_key)
            if previous is not None:
                run = _run_from_audit(conn, previous)
                if str(run["tenant_id"]) != str(tenant_id):  # the key was spent on another tenant's report
                    raise ReportError("this form key was used for another action", "request_key_reused")
                return run
        run = db.one(conn, "report_run_insert", {
            "id": new_id(), "tenant_id": tenant_id, "kind": k.name, "params": Jsonb(clean),
            "requested_by": actor.id, "requested_label": actor.label, "source_key": source_key})
        if run is None:  # this schedule slot already made its run
            return db.one(conn, "report_run_get_by_source", {"tenant_id": tenant_id, "source_key": source_key})
        jobqueue.enqueue(conn, "reports.request", {"run_id": str(run["id"])}, tenant=tenant_id,
                      idempotency_key=f"run:{run['id']}")
        rec = audit.record(conn, actor, "report.request", target_type="report", target_id=run["id"],
                           tenant_id=tenant_id,
                           reason=" ".join([k.name, *(f"{name}={value}" for name, value in clean.items())]),
                           after={"run_id": str(run["id"]), "kind": k.name, "params": clean},
                           request_key=request_key)
        if rec is None:
            raise ReportError("this form was already submitted; reload the page", "request_key_reused")
    return run


def _run_from_audit(conn, record: dict) -> dict:
    run_id = (record.get("after") or {}).get("run_id")
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params}) if run_id else None
    if run is None:
        raise ReportError("this form key was used for another action", "request_key_reused")
    return run


def get_run(conn, run_id, scope: TenantScope) -> dict | None:
    """One run inside ``scope`` (with tenant slug and name, and its chunks done), or ``None``."""
    return _cancelled_reads_failed(db.one(conn, "report_run_get", {"id": run_id, **scope.params}))


def list_runs(conn, scope: TenantScope, *, tenant_id=None, limit: int = 50) -> list[dict]:
    """The newest runs inside ``scope``, each with its progress in percent."""
    rows = db.all_rows(conn, "report_run_list", {**scope.params, "tenant_id": tenant_id, "limit": limit})
    for r in rows:
        _cancelled_reads_failed(r)
        r["progress"] = progress(r)
    return rows


def _cancelled_reads_failed(run: dict | None) -> dict | None:
    """A run whose workflow an operator cancelled (the workflow pages) will not finish: it reads as
    failed (``workflow_cancelled``), also when no job of it was left to cancel."""
    if run is not None and run.get("workflow_cancelled_at") is not None and run["status"] in ("queued", "running"):
        run.update(status="failed", error_code="workflow_cancelled")
    return run


def progress(run: dict) -> int:
    """0..100: chunks done of the planned total (assembly is the last step)."""
    if run["status"] == "ready":
        return 100
    total = run["total_chunks"]
    if not total:
        return 0
    return min(99, int(100 * run["done_chunks"] / (total + 1)))


def chunks(conn, run_id) -> list[dict]:
    """A run's chunks in order, read from its workflow's tasks: ``seq``, the slice's bounds,
    ``status`` (pending, done, failed), ``row_count``, ``part_key``, ``job_id``."""
    return db.all_rows(conn, "report_chunk_list", {"run_id": run_id})


def download_name(run: dict) -> str:
    name = get_kind(run["kind"]).filename(run["params"])
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def run_prefix(run: dict) -> str:
    return f"reports/{run['tenant_id']}/{run['id']}"


#: The assembly's task name in a run's workflow; each chunk's is ``chunk-<seq>`` (six digits, so that
#: the names sort as the slices do).
ASSEMBLE_TASK = "assemble"


def chunk_task(seq: int) -> str:
    return f"chunk-{seq:06d}"


def plan_run(conn: psycopg.Connection, run_id, *, max_rows: int = DEFAULT_CHUNK_ROWS,
             now: datetime | None = None) -> int:
    """Plan a queued run into slices and insert its workflow; returns the chunk count.

    The workflow (:mod:`opsboard.jobqueue.workflows`): a ``reports.chunk`` task per slice (its bounds
    in its payload) and the ``reports.assemble`` task depending on every chunk, so that the workflow
    releases the assembly once, when the last chunk succeeds, and a dead chunk holds it back until
    its replay succeeds.  One transaction under the run's lock: either the workflow exists and the
    run names it, or neither, so a retried request job plans again from scratch; a run already
    planned is left alone.  A run without data gets zero chunks: its workflow is the assembly alone
    (a CSV with its header only).
    """
    with conn.transaction():
        run = db.one(conn, "report_run_lock", {"id": run_id})
        if run is None:
            raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
        if run["workflow_id"] is not None:
            return run["total_chunks"]
        kind = get_kind(run["kind"])
        wf = Workflow(f"report {kind.name} {run['id']}")
        names = []
        # Slices are few (source rows / max_rows): collect them, then write; the plan's rows stream
        # on this connection and nothing else may run meanwhile.
        for seq, s in enumerate(list(kind.plan(conn, run["tenant_id"], run["params"], max_rows))):
            names.append(chunk_task(seq))
            wf.add(names[-1], "reports.chunk", {"run_id": str(run["id"]), "seq": seq, "lower": s.lower,
                                                "upper": s.upper, "est_rows": s.est_rows})
        wf.add(ASSEMBLE_TASK, "reports.assemble", {"run_id": str(run["id"])}, deps=names)
        row = wf.insert(conn, tenant=run["tenant_id"], idempotency_key=f"report:{run['id']}")
        db.one(conn, "report_run_set_planned", {"id": run["id"], "total": len(names), "workflow_id": row["id"],
                                                "now": now})
        return len(names)


def run_chunk(conn: psycopg.Connection, store: Storage, run_id, seq: int, lower: dict, upper: dict | None, *,
              cancelled=None) -> dict:
    """Write one slice's partial CSV; returns ``{"rows", "part_key"}``, the chunk task's recorded result
    (what the assembly reads).  A retry writes the same part again under the same key."""
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    if run["status"] == "failed":  # a replay of a dead chunk: the run goes on unless another is dead
        with conn.transaction():
            db.one(conn, "report_run_resume", {"id": run_id})
    kind = get_kind(run["kind"])
    part_key = f"{run_prefix(run)}/parts/{seq:06d}.csv"
    rows = 0
    with store.open_write(part_key) as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=False)
        writer = csv.writer(out)
        for row in kind.rows(conn, run["tenant_id"], run["params"], lower, upper):
            writer.writerow(csv_row(row))
            rows += 1
            if cancelled is not None and rows % FETCH_ROWS == 0 and cancelled.is_set():
                raise ReportError("chunk cancelled (lease lost or timed out)", "cancelled")
        out.flush()
        out.detach()
    return {"rows": rows, "part_key": part_key}


def assemble_run(conn: psycopg.Connection, store: Storage, run_id, parts: dict[str, dict | None], *,
                 now: datetime | None = None) -> dict:
    """Write the final CSV (BOM, header, parts in order) and mark the run ready; returns the run.

    ``parts``: the assembly task's dependencies' results by task name (``chunk-<seq>`` ->
    ``{"rows", "part_key"}``, ``job.dependency_results()``).  The file appears under its key
    atomically; the parts are deleted after the run is marked ready (a retry finds the run ready
    and only tidies up).
    """
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    prefix = run_prefix(run)
    if run["status"] != "ready":
        ordered = [parts[name] for name in sorted(parts)]
        if len(ordered) != (run["total_chunks"] or 0) or any(not p or not p.get("part_key") for p in ordered):
            raise ReportError("run %(id)s has unfinished chunks", "chunks_unfinished", params={"id": run_id})
        kind = get_kind(run["kind"])
        key = f"{prefix}/{kind.name}.csv"
        with store.open_write(key) as raw:
            raw.write(BOM)
            out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            csv.writer(out).writerow(csv_row(kind.columns))
            out.flush()
            out.detach()
            for p in ordered:
                with store.open_read(p["part_key"]) as part:
                    shutil.copyfileobj(part, raw, 1024 * 1024)
        with conn.transaction():
            db.one(conn, "report_run_set_ready", {"id": run_id, "storage_key": key,
                                                            "byte_size": store.size(key),
                                                            "rows": sum(int(p["rows"]) for p in ordered),
                                                            "now": now})
        run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    # Tidy: the parts, and what killed writers left behind; only the result stays.
    for stale in store.list(prefix):
        if stale != run["storage_key"]:
            store.delete(stale)
    store.delete_prefix(f"{prefix}/parts")
    return run


def start_scheduled(conn: psycopg.Connection, tenant_id, kind: str, params: dict, source_key: str,
                    schedule: str) -> dict:
    """The run of one schedule slot for one tenant (made once, whoever asks twice)."""
    return request_report(conn, tenant_id, kind, params, audit.Actor(label=f"schedule:{schedule}"),
                          source_key=source_key)
