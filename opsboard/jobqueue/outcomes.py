"""The worker's outcomes (success, retry, dead, snooze) for a batch of jobs in one statement, each
fenced by its attempt; lease heartbeats of long-running jobs.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

import psycopg

from .. import db
from ..storable import storable
from . import workflows


@dataclass
class OutcomeRecord:
    """One decided outcome, ready to be written by :func:`record_outcomes`."""

    job_id: uuid.UUID
    token: int            # the attempt number taken at claim (fencing token)
    kind: str             # succeeded | retryable | dead | snoozed | released
    started_at: datetime
    duration_ms: int = 0
    delay: float = 0.0
    code: str | None = None
    detail: str | None = None
    has_effects: bool = False
    #: The JSON text of the handler's result (opsboard.jobqueue.results), for a success.
    result: str | None = None
    #: The workflow task this job is (opsboard.jobqueue.workflows), if any.
    task: uuid.UUID | None = None


def record_outcomes(conn: psycopg.Connection, worker_id: str, outcomes: Iterable[OutcomeRecord],
                    now: datetime | None = None) -> set[uuid.UUID]:
    """Write many outcomes in one statement; returns the ids actually applied.

    An outcome applies only while the job is ``running`` under this worker's
    fencing token; the others (lease lost, job reclaimed) are ignored.
    """
    # One outcome per (job, attempt), the first: a timeout and the handler's late result can
    # arrive in one batch and must write one attempt.  Kept here rather than in the statement
    # (DISTINCT ON there sorted the whole batch).
    first: dict = {}
    follow = False
    for o in outcomes:
        # By the id's integer (a slot of UUID): UUID.__hash__ is a Python call per job.
        first.setdefault((getattr(o.job_id, "int", o.job_id), o.token), o)
        follow = follow or o.task is not None or o.result is not None or o.kind == "dead"
    outcomes = list(first.values())
    if not outcomes:
        return set()
    params = {
        "worker": worker_id, "now": now,
        "ids": [o.job_id for o in outcomes], "tokens": [o.token for o in outcomes],
        "started": [o.started_at for o in outcomes], "durations": [int(o.duration_ms) for o in outcomes],
        "effect_job_ids": [o.job_id for o in outcomes if o.has_effects and o.kind == "succeeded"],
        # A batch of plain successes (the usual one) sends no kinds, delays, codes or details: the
        # statement reads a missing kind as succeeded and a missing delay as 0.  Each array is dumped
        # element by element in Python (the empty arrays were a visible share of a worker's CPU on
        # no-op jobs).
        "kinds": [], "delays": [], "codes": [], "details": [],
    }
    if any(o.kind != "succeeded" or o.delay or o.code is not None or o.detail is not None for o in outcomes):
        params.update(kinds=[o.kind for o in outcomes], delays=[float(o.delay) for o in outcomes],
                      # A handler's words (its exception's message, its outcome's code and detail)
                      # come from outside: made storable here, so that no NUL or lone surrogate
                      # refuses the whole batch (opsboard.storable).
                      codes=[storable(o.code, "an outcome's code") for o in outcomes],
                      details=[storable(o.detail, "an outcome's detail") for o in outcomes])
    if not follow:
        return {r["id"] for r in db.all_rows(conn, "job_record_outcomes", params, hot=True)}
    # A batch holding a result, a workflow task or a death: what follows from it is written in the
    # same transaction as the outcomes (a task's dependents are released when it succeeds, never
    # later); a batch of plain jobs (the usual one) runs the one statement above and nothing more.
    with conn.transaction():
        applied = {r["id"] for r in db.all_rows(conn, "job_record_outcomes", params, hot=True)}
        _follow_up(conn, [o for o in outcomes if o.job_id in applied])
    return applied


def _follow_up(conn: psycopg.Connection, applied: list[OutcomeRecord]) -> None:
    """The applied outcomes' results, their tasks' dependents, and the producers waiting for them."""
    # Each result is JSON text already (results.accept): spliced into the document as it is.
    results = [f'{{"id":"{o.job_id}","result":{o.result}}}' for o in applied
               if o.result is not None and o.kind == "succeeded"]
    if results:
        db.execute(conn, "workflow_job_results_set", {"rows": "[" + ",".join(results) + "]"})
    finished = [(o.task, o.job_id, o.kind) for o in applied if o.task is not None and o.kind in ("succeeded", "dead")]
    if finished:
        workflows.finish_tasks(conn, finished)
    # Not for a task without a result: NOTIFY serializes commits on the notification queue's lock,
    # and a 10,000-task fan-out would pay it per task (its waiters poll: results.wait).
    done = [o.job_id for o in applied if (o.result is not None and o.kind == "succeeded") or o.kind == "dead"]
    if done:
        db.execute(conn, "workflow_job_notify_done", {"ids": done})


def heartbeat(conn: psycopg.Connection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]],
              lease_seconds: float, now: datetime | None = None) -> set[uuid.UUID]:
    """Extend the leases of jobs still held; returns the ids whose lease was extended."""
    if not held:
        return set()
    rows = db.all_rows(conn, "job_heartbeat_many", {
        "ids": [h[0] for h in held], "tokens": [h[1] for h in held], "worker": worker_id,
        "lease": lease_seconds, "now": now})
    return {r["id"] for r in rows}
