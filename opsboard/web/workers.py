"""Workers: the live worker processes, what they run, and which went silent; and each one's
controls (issue 44): quiet it, stop it, set its slots.  The controls are operator staff's
(``jobs.pause`` with the platform's scope, as the live queue slots); each is audited and
idempotent (:mod:`opsboard.worker_commands`) and the worker obeys within seconds."""
from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask_babel import gettext as _

from .. import dashboard, db, worker_commands
from ..config import QUEUE_SLOTS_MAX
from ..personal_data import normalize_digits
from . import forms
from .context import get_db
from .errors import ApiError
from .i18n import num
from .security import audit_denied, current_scope, requires

bp = Blueprint("workers", __name__, url_prefix="/workers")

bp.context_processor(forms.form_globals)

#: Who may quiet, stop or resize a worker: the permission of the live queue slots, platform-wide.
CONTROL = "jobs.pause"


def _context() -> dict:
    scope = current_scope("workers.view")
    if not scope.all:
        # Worker processes are the platform's (hosts, pids, versions), not a tenant's.
        raise ApiError(403, "platform_staff_only", _("The workers page is for the platform's own staff."))
    with get_db().connection() as conn:
        workers = dashboard.list_workers(conn, scope)
        commands = worker_commands.list_commands(conn)
    return {"workers": workers, "stale_seconds": dashboard.WORKER_STALE_SECONDS,
            "stale_count": sum(1 for w in workers if w["stale"]), "commands": commands,
            "can_control": current_scope(CONTROL).all}


@bp.route("/")
@requires("workers.view")
def index():
    return render_template("workers/index.html", **_context())


@bp.route("/_list")
@requires("workers.view")
def worker_list():
    return render_template("workers/_list.html", **_context())


def _controlled_worker(conn, worker_id: str) -> dict:
    """The worker, for an operator who may control workers (else 403; an unknown id: 404)."""
    if not current_scope(CONTROL).all:
        audit_denied(CONTROL)
        raise ApiError(403, "platform_staff_only", _("Only the platform's staff with %(permission)s control workers.",
                                                     permission=CONTROL))
    worker = db.one(conn, "worker_get", {"id": worker_id})
    if worker is None:
        raise ApiError(404, "not_found", _("No worker %(worker)s is registered.", worker=worker_id))
    return worker


@bp.route("/<path:worker_id>/controls")
@requires(CONTROL)
def controls(worker_id: str):
    with get_db().connection() as conn:
        worker = _controlled_worker(conn, worker_id)
        command = worker_commands.read(conn, worker_id)
    return render_template("workers/controls.html", w=worker, command=command, slots_max=QUEUE_SLOTS_MAX)


def _done(message: str):
    flash(message)
    return redirect(url_for("workers.index"), code=303)


@bp.route("/<path:worker_id>/quiet", methods=["POST"])
@requires(CONTROL)
def quiet(worker_id: str):
    want = request.form.get("quiet", "yes")
    if want not in ("yes", "no"):
        raise ApiError(400, "invalid_quiet", _("quiet must be yes or no"))
    with get_db().connection() as conn:
        _controlled_worker(conn, worker_id)
        worker_commands.set_quiet(conn, forms.actor(), worker_id, want == "yes", forms.reason(),
                                  request_key=forms.request_key())
    return _done(_("Worker %(worker)s is quiet: it finishes what it runs and claims nothing more.", worker=worker_id)
                 if want == "yes" else _("Worker %(worker)s claims jobs again.", worker=worker_id))


@bp.route("/<path:worker_id>/stop", methods=["POST"])
@requires(CONTROL)
def stop(worker_id: str):
    with get_db().connection() as conn:
        _controlled_worker(conn, worker_id)
        worker_commands.request_stop(conn, forms.actor(), worker_id, forms.reason(), request_key=forms.request_key())
    return _done(_("Worker %(worker)s was asked to stop: it finishes what it runs within its grace, "
                   "gives back the rest and exits.", worker=worker_id))


@bp.route("/<path:worker_id>/slots", methods=["POST"])
@requires(CONTROL)
def slots(worker_id: str):
    queue = (request.form.get("queue") or "").strip()
    raw = normalize_digits((request.form.get("slots") or "").strip())
    if raw and (not raw.isascii() or not raw.isdigit() or len(raw) > 6 or not 1 <= int(raw) <= QUEUE_SLOTS_MAX):
        raise ApiError(400, "invalid_slots", _("Slots are a whole number from 1 to %(high)s; leave it empty to go "
                                               "back to the queue's setting.", high=QUEUE_SLOTS_MAX), field="slots")
    value = int(raw) if raw else None
    with get_db().connection() as conn:
        worker = _controlled_worker(conn, worker_id)
        if queue not in (worker["queues"] or {}):
            raise ApiError(400, "invalid_queue", _("This worker does not serve that queue."), field="queue")
        worker_commands.set_slots(conn, forms.actor(), worker_id, queue, value, forms.reason(),
                                  request_key=forms.request_key())
    if value is None:
        return _done(_("Worker %(worker)s: queue %(queue)s back to the queue's setting.", worker=worker_id, queue=queue))
    return _done(_("Worker %(worker)s: %(n)s slots for queue %(queue)s.", worker=worker_id, n=num(value), queue=queue))
