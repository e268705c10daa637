"""Support tickets for agents: the queue (filters, keyset pages, SLA badges), a ticket's
timeline and its actions as htmx forms (errors inline, in the form that caused them)."""
from __future__ import annotations

import functools

from flask import (Blueprint, abort, current_app, make_response, redirect, render_template, request, send_file,
                   url_for)
from flask_babel import gettext as _, lazy_gettext as _l
from flask_login import current_user

from .. import storage
from ..errors import OpsError
from ..tickets import service, workflow
from . import forms
from .context import get_config, get_db, request_id
from .errors import ApiError
from .security import audit_denied, current_scope, requires, takes_attachments

bp = Blueprint("tickets", __name__, url_prefix="/tickets")
bp.context_processor(forms.form_globals)

PAGE = 50
#: An SLA state's label (in the page's language only: a badge read "On track · در مسیر" before,
#: issue 44) and its badge class.
SLA_LABELS = {
    "on_track": (_l("On track"), "status-succeeded"),
    "at_risk": (_l("At risk"), "status-retryable"),
    "breached": (_l("Breached"), "status-dead"),
    "paused": (_l("Paused"), "status-running"),
    "met": (_l("Met"), "pill"),
}


@bp.app_template_global()
def sla_badge_info(state: str):
    """(label in the page's language, badge class) of an SLA state."""
    label, css = SLA_LABELS.get(state, (state, "pill"))
    return str(label), css


def _filters() -> dict:
    args = request.args
    status = forms.arg_text("status", max_len=40)
    sla_state = forms.arg_text("sla", max_len=20)
    assignee = forms.arg_text("assignee", max_len=40)
    return {
        "status": None if status in (None, "open") else status, "open_only": status == "open",
        "category": forms.arg_text("category", max_len=63), "sla_state": sla_state,
        "assignee_id": current_user.id if assignee == "me" else (forms.arg_uuid("assignee")
                                                                if assignee not in (None, "me", "none") else None),
        "unassigned": assignee == "none", "tenant_id": forms.arg_uuid("tenant"),
        "search": forms.arg_text("q", max_len=100), "after_id": forms.arg_uuid("after"),
    }, {k: args.get(k) for k in service.QUEUE_FILTERS if args.get(k)}


def _queue(choices: bool = True) -> dict:
    flt, raw = _filters()
    with get_db().connection() as conn:
        rows = service.list_queue(conn, current_scope("tickets.view"), limit=PAGE + 1, **flt)
        # The filter form's choices (every category of every tenant in scope: thousands of rows for an
        # ops user) only on the full page; the htmx rows partial has no form.
        categories = service.categories(conn, current_scope("tickets.view")) if choices else []
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    next_args = forms.link_args(service.QUEUE_FILTERS, drop=("after",))
    if more:
        next_args["after"] = str(rows[-1]["id"])
    return {"rows": rows, "more": more, "next_args": next_args,
            "first_args": forms.link_args(service.QUEUE_FILTERS, drop=("after",)), "args": raw, "statuses": workflow.STATUSES,
            "sla_states": service.SLA_STATES, "categories": categories}


def customers_to_portal(view):
    """An end user (inbox.view, no tickets.view) who opens an agent's ticket address -- an old
    notification's link, a bookmark -- lands on their own ticket pages (/my/tickets, web.portal)
    instead of a 403; the portal answers 404 for a ticket that is not theirs."""
    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        if current_user.is_authenticated and not current_user.has("tickets.view") \
                and current_user.has("inbox.view") and "portal" in current_app.blueprints:
            if "ticket_id" in kwargs:
                return redirect(url_for("portal.detail", ticket_id=kwargs["ticket_id"]))
            return redirect(url_for("portal.index"))
        return view(*args, **kwargs)
    return wrapped


@bp.route("/")
@customers_to_portal
@requires("tickets.view")
def index():
    return render_template("tickets/index.html", **_queue())


@bp.route("/_rows")
@requires("tickets.view")
def rows():
    resp = make_response(render_template("tickets/_rows.html", **_queue(choices=False)))
    resp.headers["HX-Push-Url"] = url_for("tickets.index", **forms.link_args(service.QUEUE_FILTERS))
    return resp


def _load(conn, ticket_id) -> dict:
    ticket = service.get_ticket(conn, current_scope("tickets.view"), ticket_id)
    if ticket is None:
        abort(404, _("No such ticket, or it is not yours to see."))
    return ticket


def _upload_rules() -> dict:
    """What the upload fields accept: the file name endings of the allowed types, their names and the size."""
    config = get_config()
    exts = service.accepted_extensions(config.ticket_attachment_types)
    return {"accept_ext": exts, "max_bytes": config.ticket_attachment_max_bytes,
            "max_mib": "%g" % (config.ticket_attachment_max_bytes / (1024 * 1024)),
            "accept_names": ", ".join(e.lstrip(".").upper() for e in exts)}


def _context(conn, ticket: dict, sent: str | None = None) -> dict:
    messages, attachments = service.timeline(conn, current_scope("tickets.view"), ticket["id"], current_user.id)
    by_message: dict = {}
    for a in attachments:
        by_message.setdefault(a["message_id"], []).append(a)
    caller = service.Caller.of(current_user, ticket["tenant_id"])
    role = caller.role_for(ticket)
    can_work = current_user.can("tickets.work", ticket["tenant_id"]) and role is not None
    return {"ticket": ticket, "messages": messages, "attachments": by_message,
            "actions": workflow.allowed(ticket["status"], role) if can_work else [],
            "transitions": [workflow.TRANSITIONS[a] for a in (workflow.allowed_transitions(ticket["status"], role)
                                                              if can_work else [])],
            "agents": service.agents(conn, ticket["tenant_id"]) if can_work else [],
            "priorities": workflow.PRIORITIES, "upload": _upload_rules(),
            # The action just done: its form comes back empty; the others keep what the user typed.
            "sent": sent}


@bp.route("/<uuid:ticket_id>")
@customers_to_portal
@requires("tickets.view")
def detail(ticket_id):
    with get_db().connection() as conn:
        ticket = _load(conn, ticket_id)
        return render_template("tickets/detail.html", **_context(conn, ticket))


@bp.route("/<uuid:ticket_id>/act/<action>", methods=["POST"])
@takes_attachments   # a reply with attachments may carry up to the configured size (the app caps at 1 MiB)
@requires("tickets.work")
def act(ticket_id, action):
    if action not in workflow.ALL:
        raise ApiError(404, "not_found", _("No such ticket action."))
    key = forms.request_key()
    form = request.form
    fields = {k: form.get(k) for k in ("body", "assignee_id", "decision", "reason", "resolution_code",
                                       "resolution_summary", "priority") if form.get(k) is not None}
    if action == "decide":
        fields["reason"] = form.get("decision_reason")
    uploads = [service.Upload(f.filename or "attachment", f.read()) for f in request.files.getlist("files")
               if f and f.filename]
    config = get_config()
    with get_db().connection() as conn:
        ticket = _load(conn, ticket_id)
        caller = service.Caller.of(current_user, ticket["tenant_id"], request_id())
        try:
            service.act(conn, ticket_id, action, caller, scope=current_scope("tickets.work"), fields=fields,
                        reason=form.get("comment"), request_key=key, uploads=uploads,
                        store=storage.from_config(config),
                        limits=(config.ticket_attachment_max_bytes, config.ticket_attachment_types))
        except OpsError as exc:
            if exc.status == 403:  # the workflow forbids this role the action: recorded as denied
                audit_denied("tickets.work", ticket["tenant_id"])
            raise
        if not request.headers.get("HX-Request"):
            return redirect(url_for("tickets.detail", ticket_id=ticket_id))
        ticket = _load(conn, ticket_id)
        resp = make_response(render_template("tickets/_ticket.html", **_context(conn, ticket, sent=action)))
    resp.headers["HX-Retarget"] = "#ticket"
    resp.headers["HX-Reswap"] = "outerHTML"
    return resp


@bp.route("/<uuid:ticket_id>/attachments/<uuid:attachment_id>")
@requires("tickets.view")
def attachment(ticket_id, attachment_id):
    with get_db().connection() as conn:
        _load(conn, ticket_id)
        _messages, attachments = service.timeline(conn, current_scope("tickets.view"), ticket_id, current_user.id)
    found = next((a for a in attachments if a["id"] == attachment_id), None)
    if found is None:
        abort(404, _("No such attachment, or it is not yours to see."))
    return download(found)


#: Stored types an attachment is sent as: images and PDF, which a browser shows in a sandbox at most.  Any
#: other (text/plain, HTML a sniffer let through, an allow-list widened by configuration) is sent as
#: application/octet-stream, so no browser renders it (the API documents exactly these).
SAFE_DOWNLOAD_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})


def download(att: dict):
    """An attachment as a download: never rendered inline, never sniffed by the browser."""
    store = storage.from_config(get_config())
    try:
        fh = store.open_read(att["storage_key"])
    except (storage.StorageError, FileNotFoundError):
        abort(404, _("The attachment's file is missing."))
    mimetype = att["content_type"] if att["content_type"] in SAFE_DOWNLOAD_TYPES else "application/octet-stream"
    resp = send_file(fh, mimetype=mimetype, as_attachment=True, download_name=att["filename"], max_age=0)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    resp.headers["Cache-Control"] = "private, no-store"
    return resp

