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
    """One run inside ``scope`` (with tenant slug and name), or ``None``."""
    return db.one(conn, "report_run_get", {"id": run_id, **scope.params})


def list_runs(conn, scope: TenantScope, *, tenant_id=None, limit: int = 50) -> list[dict]:
    """The newest runs inside ``scope``, each with its progress in percent."""
    rows = db.all_rows(conn, "report_run_list", {**scope.params, "tenant_id": tenant_id, "limit": limit})
    for r in rows:
        r["progress"] = progress(r)
    return rows


def progress(run: dict) -> int:
    """0..100: chunks done of the planned total (assembly is the last step)."""
    if run["status"] == "ready":
        return 100
    total = run["total_chunks"]
    if not total:
        return 0
    return min(99, int(100 * run["done_chunks"] / (total + 1)))


def chunks(conn, run_id) -> list[dict]:
    return db.all_rows(conn, "report_chunk_list", {"run_id": run_id})


def download_name(run: dict) -> str:
    name = get_kind(run["kind"]).filename(run["params"])
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def run_prefix(run: dict) -> str:
    return f"reports/{run['tenant_id']}/{run['id']}"


def plan_run(conn: psycopg.Connection, run_id, *, max_rows: int = DEFAULT_CHUNK_ROWS,
             now: datetime | None = None) -> int:
    """Plan a queued run into slices and enqueue a chunk job per slice; returns the chunk count.

    One transaction under the run's lock: either every chunk row and job exists
    or none does, so a retried request job plans again from scratch.  A run
    already planned is left alone.  A run without data gets zero chunks and
    goes straight to assembly (a CSV with its header only).
    """
    with conn.transaction():
        run = db.one(conn, "report_run_lock", {"id": run_id})
        if run is None:
            raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
        if run["total_chunks"] is not None:
            return run["total_chunks"]
        kind = get_kind(run["kind"])
        jobs = []
        total = 0
        # Slices are few (source rows / max_rows): collect them, then write; the
        # plan's rows stream on this connection and nothing else may run meanwhile.
        for s in list(kind.plan(conn, run["tenant_id"], run["params"], max_rows)):
            seq = total
            db.execute(conn, "report_chunk_insert", {"run_id": run["id"], "seq": seq, "lower": Jsonb(s.lower),
                                                     "upper": Jsonb(s.upper) if s.upper is not None else None,
                                                     "est_rows": s.est_rows})
            jobs.append(jobqueue.NewJob("reports.chunk", {"run_id": str(run["id"]), "seq": seq},
                                     tenant=run["tenant_id"], idempotency_key=f"chunk:{run['id']}:{seq}"))
            if len(jobs) >= 1000:
                jobqueue.enqueue_many(conn, jobs)
                jobs = []
            total += 1
        jobqueue.enqueue_many(conn, jobs)
        db.one(conn, "report_run_set_planned", {"id": run["id"], "total": total, "now": now})
        if total == 0:
            _enqueue_assemble(conn, run, now)
        return total


def _enqueue_assemble(conn, run: dict, now) -> bool:
    if db.one(conn, "report_run_mark_assemble", {"id": run["id"], "now": now}) is None:
        return False
    jobqueue.enqueue(conn, "reports.assemble", {"run_id": str(run["id"])}, tenant=run["tenant_id"],
                  idempotency_key=f"assemble:{run['id']}")
    return True


def run_chunk(conn: psycopg.Connection, store: Storage, run_id, seq: int, *, job_id=None,
              cancelled=None, now: datetime | None = None) -> dict:
    """Write one slice's partial CSV and count it; returns ``{"rows", "counted", "assemble"}``.

    The part is written before the counter moves, so a chunk counted done
    always has its part.  A retry of a chunk already done changes nothing.
    """
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    chunk = db.one(conn, "report_chunk_get", {"run_id": run_id, "seq": seq})
    if chunk is None:
        raise ReportError("run %(id)s has no chunk %(seq)s", "not_found", params={"id": run_id, "seq": seq})
    if chunk["status"] == "done":
        return {"rows": chunk["row_count"], "counted": False, "assemble": False}
    if chunk["status"] == "failed":  # a replay of its dead job
        with conn.transaction():
            db.execute(conn, "report_chunk_reopen", {"run_id": run_id, "seq": seq, "job_id": job_id})
            db.one(conn, "report_run_resume", {"id": run_id})
    kind = get_kind(run["kind"])
    part_key = f"{run_prefix(run)}/parts/{seq:06d}.csv"
    rows = 0
    with store.open_write(part_key) as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=False)
        writer = csv.writer(out)
        for row in kind.rows(conn, run["tenant_id"], run["params"], chunk["lower_bound"], chunk["upper_bound"]):
            writer.writerow(csv_row(row))
            rows += 1
            if cancelled is not None and rows % FETCH_ROWS == 0 and cancelled.is_set():
                raise ReportError("chunk cancelled (lease lost or timed out)", "cancelled")
        out.flush()
        out.detach()
    with conn.transaction():
        counted = db.one(conn, "report_chunk_finish", {"run_id": run_id, "seq": seq, "rows": rows,
                                                       "part_key": part_key, "job_id": job_id, "now": now})
        if counted is None:
            return {"rows": rows, "counted": False, "assemble": False}
        c = db.one(conn, "report_run_count_chunk", {"id": run_id, "rows": rows})
        assemble = c["done_chunks"] == c["total_chunks"] and _enqueue_assemble(conn, run, now)
    return {"rows": rows, "counted": True, "assemble": assemble}


def assemble_run(conn: psycopg.Connection, store: Storage, run_id, *, now: datetime | None = None) -> dict:
    """Write the final CSV (BOM, header, parts in order) and mark the run ready; returns the run.

    The file appears under its key atomically; the parts are deleted after
    the run is marked ready (a retry finds the run ready and only tidies up).
    """
    run = db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
    if run is None:
        raise ReportError("no report run %(id)s", "not_found", params={"id": run_id})
    prefix = run_prefix(run)
    if run["status"] != "ready":
        parts = chunks(conn, run_id)
        if any(p["status"] != "done" for p in parts) or len(parts) != (run["total_chunks"] or 0):
            raise ReportError("run %(id)s has unfinished chunks", "chunks_unfinished", params={"id": run_id})
        kind = get_kind(run["kind"])
        key = f"{prefix}/{kind.name}.csv"
        with store.open_write(key) as raw:
            raw.write(BOM)
            out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            csv.writer(out).writerow(csv_row(kind.columns))
            out.flush()
            out.detach()
            for p in parts:
                with store.open_read(p["part_key"]) as part:
                    shutil.copyfileobj(part, raw, 1024 * 1024)
        with conn.transaction():
            updated = db.one(conn, "report_run_set_ready", {"id": run_id, "storage_key": key,
                                                            "byte_size": store.size(key), "now": now})
        run = updated or db.one(conn, "report_run_get", {"id": run_id, **TenantScope(all=True).params})
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
