"""Recorded results: the JSON value a handler returns, stored with its job.

A handler that returns a JSON value (a dict, a list, a string, a number or a boolean) instead of an
outcome succeeds with that value as its result (:func:`accept`); its JSON text is bounded
(``OPSBOARD_JOB_RESULT_MAX_BYTES``, :data:`DEFAULT_MAX_BYTES`): a larger one, or a value JSON
cannot hold, fails the attempt for good (``result_too_large``, ``result_not_json``): the handler
would return it again.  The worker writes a batch's results in the transaction that records the
batch's outcomes, in a statement of its own that only a batch holding a result runs
(:func:`opsboard.jobqueue.outcomes.record_outcomes`).

A producer waits for a job's result with :func:`wait`: woken by ``NOTIFY opsboard_job_done`` (the
job's id), which the completing transaction sends for a job that recorded a result or died; any
other job is found by the wait's poll (a NOTIFY per job would serialize every
completing commit on the notification queue's lock).
"""
from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from .. import db, retry
from ..auth import TenantScope
from .enqueue import ALL_TENANTS

#: The largest result's JSON text, in bytes (OPSBOARD_JOB_RESULT_MAX_BYTES).
DEFAULT_MAX_BYTES = 64 * 1024
#: The channel a completing transaction notifies with a finished job's id.
CHANNEL = "opsboard_job_done"
#: A job's final statuses.
FINAL = ("succeeded", "dead", "cancelled")


def accept(value: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[retry.Outcome, str | None]:
    """A handler's returned value as an outcome and the result's JSON text (``None``: none).

    ``None`` and outcomes are what they were; any other value is a result: a success carrying its
    JSON text, or a permanent failure when it is not JSON or is larger than ``max_bytes``."""
    if value is None or isinstance(value, (retry.Outcome, BaseException)):
        return retry.classify(value), None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        return retry.Permanent("result_not_json", detail=f"the handler's result is not JSON: {type(exc).__name__}"), None
    if "\x00" in text:
        return retry.Permanent("result_not_json", detail="the handler's result holds a NUL character"), None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        return retry.Permanent("result_too_large",
                               detail=f"the handler's result is {size} bytes; at most {max_bytes} are kept"), None
    return retry.Success(), text


def get_result(conn: psycopg.Connection, job_id, scope: TenantScope = ALL_TENANTS) -> dict | None:
    """A job's status and recorded result in ``scope`` (``None``: no such job)."""
    return db.one(conn, "workflow_job_get_result", {"id": job_id, **scope.params})


def wait(conn: psycopg.Connection, job_id, timeout: float, *, scope: TenantScope = ALL_TENANTS, hub=None,
         poll: float = 1.0) -> dict | None:
    """Wait up to ``timeout`` seconds for a job to finish; its row (status, result) once it has,
    ``None`` when the time ran out (or there is no such job in ``scope``).

    Woken by NOTIFY: through the process's :class:`opsboard.pgnotify.Hub` when ``hub`` is given,
    else by LISTENing on ``conn`` itself (an autocommit connection the caller does not use
    meanwhile).  Polls every ``poll`` seconds all the same (a job that sends no notification)."""
    deadline = time.monotonic() + max(0.0, timeout)
    key = str(job_id)
    if hub is not None:
        with hub.waiter(CHANNEL, key=key) as w:
            while True:
                row = get_result(conn, job_id, scope)
                if row is None or row["status"] in FINAL:
                    return row if row is not None and row["status"] in FINAL else None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                w.wait(min(left, poll))
    if not conn.autocommit:
        raise ValueError("results.wait needs an autocommit connection (or a hub)")
    conn.execute(f"LISTEN {CHANNEL}")
    try:
        while True:
            row = get_result(conn, job_id, scope)
            if row is None:
                return None
            if row["status"] in FINAL:
                return row
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for n in conn.notifies(timeout=min(left, poll), stop_after=1):
                if n.payload == key:
                    break
    finally:
        conn.execute(f"UNLISTEN {CHANNEL}")

