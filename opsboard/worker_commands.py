"""What an operator asks of one worker process (issue 44): quiet it, stop it, set its slots.

A worker process is told through the database, like everything else here: one
``worker_commands`` row per worker (migration 0084) holds the desired state, and
its trigger notifies the worker on :data:`CHANNEL` (payload: the worker's id).
The worker (``worker.commands``) reads its row when notified and every couple
of seconds, and obeys:

* **quiet**: it claims nothing more and finishes what it holds; un-quieted, it
  claims again.
* **stop**: a graceful drain, exactly what SIGTERM does (stop claiming, give the
  running handlers the shutdown grace, release the rest, exit 0).
* **slots**: that worker's slots of one queue, over the operator's live setting
  of the queue (``pauses`` limits) and the worker's own configuration.

Each change is an audited, idempotent operator action (:func:`opsboard.audit.operator_action`);
the web checks the permission (operator staff with ``jobs.pause``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from . import audit, db
from .config import QUEUE_SLOTS_MAX
from .errors import OpsError

#: pg_notify channel of ``worker_commands`` (migration 0084); the payload is the worker's id.
CHANNEL = "opsboard_workers"


@dataclass(frozen=True)
class Command:
    """One worker's command row (all defaults: nothing asked)."""

    quiet: bool = False
    stop_requested_at: datetime | None = None
    slots: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, row: dict | None) -> "Command":
        if row is None:
            return cls()
        slots = {str(q): int(n) for q, n in (row.get("slots") or {}).items()
                 if isinstance(n, int) and 0 < n <= QUEUE_SLOTS_MAX}
        return cls(quiet=bool(row["quiet"]), stop_requested_at=row["stop_requested_at"], slots=slots)


def read(conn: psycopg.Connection, worker_id: str) -> Command:
    """What is asked of ``worker_id`` now."""
    return Command.of(db.one(conn, "worker_command_get", {"id": worker_id}))


def list_commands(conn: psycopg.Connection) -> dict[str, dict]:
    """Every worker's command row by worker id (the Workers page)."""
    return {r["worker_id"]: r for r in db.all_rows(conn, "worker_command_list")}


def forget(conn: psycopg.Connection, worker_id: str) -> None:
    """The worker stopped cleanly: its row goes (a command is about one process's life)."""
    db.execute(conn, "worker_command_delete", {"id": worker_id})


def _worker(conn: psycopg.Connection, worker_id: str) -> dict:
    row = db.one(conn, "worker_get", {"id": worker_id})
    if row is None:
        raise OpsError("no worker %(worker)s is registered", "not_found", params={"worker": worker_id})
    return row


def _act(conn, actor, action: str, worker_id: str, reason, request_key, change) -> dict:
    def perform(ctx: audit.ActionContext) -> dict:
        worker = _worker(conn, worker_id)
        before = Command.of(db.one(conn, "worker_command_get", {"id": worker_id}))
        row = change(worker)
        ctx.write(before={"quiet": before.quiet, "stop": before.stop_requested_at is not None, "slots": before.slots},
                  after={"quiet": row["quiet"], "stop": row["stop_requested_at"] is not None, "slots": row["slots"]})
        return row

    def repeat(previous: dict) -> dict:
        return db.one(conn, "worker_command_get", {"id": worker_id}) or {}

    return audit.operator_action(conn, actor, action, target_type="worker", target_id=worker_id, reason=reason,
                                 request_key=request_key, perform=perform, repeat=repeat)


def set_quiet(conn: psycopg.Connection, actor: audit.Actor, worker_id: str, quiet: bool, reason: str | None, *,
              request_key: str | None = None) -> dict:
    """Quiet ``worker_id`` (``quiet``: it claims nothing) or let it claim again; audited
    ``worker.quiet`` / ``worker.unquiet``."""
    return _act(conn, actor, "worker.quiet" if quiet else "worker.unquiet", worker_id, reason, request_key,
                lambda w: db.one(conn, "worker_command_set_quiet",
                                 {"id": worker_id, "quiet": quiet, "actor": actor.label}))


def request_stop(conn: psycopg.Connection, actor: audit.Actor, worker_id: str, reason: str | None, *,
                 request_key: str | None = None) -> dict:
    """Ask ``worker_id`` to drain and exit, as SIGTERM would; audited ``worker.stop``."""
    return _act(conn, actor, "worker.stop", worker_id, reason, request_key,
                lambda w: db.one(conn, "worker_command_request_stop", {"id": worker_id, "actor": actor.label}))


def set_slots(conn: psycopg.Connection, actor: audit.Actor, worker_id: str, queue: str, slots: int | None,
              reason: str | None, *, request_key: str | None = None) -> dict:
    """Set ``worker_id``'s slots of ``queue`` (``None``: back to the queue's live setting or the
    worker's own); audited ``worker.slots``.  The queue must be one the worker serves."""
    if slots is not None and not 0 < slots <= QUEUE_SLOTS_MAX:
        raise OpsError("slots must be a number from 1 to %(max)s", "invalid_slots", params={"max": QUEUE_SLOTS_MAX})

    def change(worker: dict) -> Any:
        if queue not in (worker["queues"] or {}):
            raise OpsError("worker %(worker)s does not serve queue %(queue)s", "invalid_queue",
                           params={"worker": worker_id, "queue": queue})
        return db.one(conn, "worker_command_set_slots",
                      {"id": worker_id, "queue": queue, "slots": slots, "actor": actor.label})

    return _act(conn, actor, "worker.slots", worker_id, reason, request_key, change)
