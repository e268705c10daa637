"""A customer's ticket pages (/my/tickets), for a signed-in end user (the ``member`` role: inbox.view).

The customer API's rules (:mod:`opsboard.web.api.tickets`), through the same core: the tenant is the
one of the user's active membership (``service.customer_tenant``: none or several -> 403), a ticket is
theirs when they are its requester in that tenant (anything else -> 404, one answer for "not yours" and
"not there"), the conversation is the public one (``service.public_timeline``: never an internal note
or its attachment), and every write is ``service.create_ticket`` / ``service.act`` with no agent role:
the workflow's ``requester`` column decides (reply, reopen within the window, cancel), each audited
there like the API's (``ticket.create``, ``ticket.reply``, ...), idempotent by the form's request key.

Attachments: the same sniffing, size limit, allowed types and storage as the API (``service.Upload``,
``storage.from_config``, the download of :func:`opsboard.web.tickets.download`).  Writes are limited
per user by one token bucket shared by every web process (``OPSBOARD_PORTAL_WRITES_PER_MINUTE``,
``OPSBOARD_PORTAL_WRITE_BURST``): past it 429 with ``Retry-After``; the leader drops buckets that are
full again (``portal.PortalBucketSweeper``).  CSRF: the app-wide check (every
form carries the session's token).  Plain forms, POST then redirect (303): no script needed.
"""
from __future__ import annotations

import math
import uuid

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_babel import gettext as _
from flask_login import current_user

from .. import backpressure, storage
from ..errors import OpsError
from ..tickets import portal, service, workflow
from . import forms
from .context import get_config, get_db, request_id
from .errors import ApiError, human_message, wants_json
from .security import requires, takes_attachments

bp = Blueprint("portal", __name__, url_prefix="/my/tickets")
bp.context_processor(forms.form_globals)

PAGE = 25
#: The customer's actions that change the status, each its own small form.
STATUS_ACTIONS = ("reopen", "cancel")


def _tenant(conn) -> dict:
    """The tenant the signed-in customer acts in (403 ``no_tenant`` / ``tenant_ambiguous`` otherwise)."""
    return service.customer_tenant(conn, current_user.id)


def _caller() -> service.Caller:
    # No agent role, whatever the user's other memberships: on these pages they act as the requester.
    return service.Caller(current_user.id, current_user.email, None, request_id())


def _own(conn, tenant: dict, ticket_id) -> dict:
    ticket = portal.own_ticket(conn, tenant["tenant_id"], current_user.id, ticket_id)
    if ticket is None:
        abort(404, _("No such ticket, or it is not yours to see."))
    return ticket


def _take_write_token(conn) -> None:
    """One write of this user's bucket, or 429 with Retry-After."""
    config = get_config()
    token = backpressure.take_token(conn, portal.bucket_name(current_user.id), config.portal_writes_per_minute / 60.0,
                                    config.portal_write_burst)
    if not token.granted:
        wait = max(1, math.ceil(token.wait_seconds))
        raise ApiError(429, "rate_limited", _("Too many changes in a short time; try again in %(n)s seconds.",
                                              n=wait), headers={"Retry-After": str(wait)})


def _limits():
    config = get_config()
    return storage.from_config(config), (config.ticket_attachment_max_bytes, config.ticket_attachment_types)


def _uploads() -> list:
    return [service.Upload(f.filename or "attachment", f.read()) for f in request.files.getlist("files")
            if f and f.filename]


def _upload_rules() -> dict:
    config = get_config()
    exts = service.accepted_extensions(config.ticket_attachment_types)
    return {"accept_ext": exts, "max_bytes": config.ticket_attachment_max_bytes,
            "max_mib": "%g" % (config.ticket_attachment_max_bytes / (1024 * 1024)),
            "accept_names": ", ".join(e.lstrip(".").upper() for e in exts)}


def _conversation(conn, tenant: dict, ticket: dict):
    messages, attachments = service.public_timeline(conn, tenant["tenant_id"], current_user.id, ticket["id"])
    # The agents' SLA breach notices are system messages of the timeline: a customer is told the promise
    # (portal.promise), not the internal badge.
    messages = [m for m in messages if not (m["kind"] == "system" and m["body"].startswith("SLA breached"))]
    by_message: dict = {}
    for a in attachments:
        by_message.setdefault(a["message_id"], []).append(a)
    return messages, by_message


def _detail_page(conn, tenant: dict, ticket: dict, *, error: OpsError | None = None, failed: str | None = None,
                 typed: str = "", status: int = 200):
    messages, attachments = _conversation(conn, tenant, ticket)
    html = render_template("portal/detail.html", ticket=ticket, messages=messages, attachments=attachments,
                           actions=portal.customer_actions(ticket), promise=portal.promise(ticket),
                           upload=_upload_rules(), error=error, error_text=human_message(error) if error else "",
                           failed=failed, typed=typed, reopen_days=workflow.REOPEN_WINDOW.days)
    return html, status


@bp.route("/")
@requires("inbox.view")
def index():
    after = forms.arg_uuid("after")
    with get_db().connection() as conn:
        tenant = _tenant(conn)
        rows = portal.own_tickets(conn, tenant["tenant_id"], current_user.id, after_id=after, limit=PAGE + 1)
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    return render_template("portal/index.html", rows=rows, next_after=rows[-1]["id"] if more else None,
                           paged=after is not None)


@bp.route("/new")
@requires("inbox.view")
def new():
    with get_db().connection() as conn:
        tenant = _tenant(conn)
        categories = service.categories(conn, portal.scope(tenant["tenant_id"]))
    return render_template("portal/new.html", categories=categories, priorities=workflow.PRIORITIES,
                           upload=_upload_rules(), form={}, error=None, error_text="")


@bp.route("/new", methods=["POST"])
@takes_attachments
@requires("inbox.view")
def create():
    key = forms.request_key()
    form = request.form
    store, limits = _limits()
    uploads = _uploads()
    with get_db().connection() as conn:
        tenant = _tenant(conn)
        _take_write_token(conn)
        try:
            ticket = service.create_ticket(conn, _caller(), tenant_id=tenant["tenant_id"],
                                           subject=form.get("subject", ""), body=form.get("body", ""),
                                           priority=form.get("priority") or "normal",
                                           category=form.get("category") or None, uploads=uploads, store=store,
                                           limits=limits, request_key=key,
                                           round_robin=get_config().ticket_round_robin)
        except OpsError as exc:
            if wants_json() or exc.status in (403, 404):
                raise
            categories = service.categories(conn, portal.scope(tenant["tenant_id"]))
            return render_template("portal/new.html", categories=categories, priorities=workflow.PRIORITIES,
                                   upload=_upload_rules(), form=form, error=exc,
                                   error_text=human_message(exc)), exc.status
    return redirect(url_for("portal.detail", ticket_id=ticket["id"]), 303)


@bp.route("/<uuid:ticket_id>")
@requires("inbox.view")
def detail(ticket_id):
    with get_db().connection() as conn:
        tenant = _tenant(conn)
        ticket = _own(conn, tenant, ticket_id)
        html, status = _detail_page(conn, tenant, ticket)
    return html, status


def _act(ticket_id, action: str, fields: dict, uploads=()):
    key = forms.request_key()
    store, limits = _limits()
    with get_db().connection() as conn:
        tenant = _tenant(conn)
        ticket = _own(conn, tenant, ticket_id)
        _take_write_token(conn)
        try:
            service.act(conn, ticket_id, action, _caller(), scope=portal.scope(tenant["tenant_id"]), fields=fields,
                        request_key=key, uploads=uploads, store=store, limits=limits)
        except OpsError as exc:
            if exc.code == "not_found":
                abort(404, _("No such ticket, or it is not yours to see."))
            if wants_json():
                raise
            ticket = _own(conn, tenant, ticket_id)
            return _detail_page(conn, tenant, ticket, error=exc, failed=action, typed=fields.get("body", ""),
                                status=exc.status)
    anchor = "latest" if action == "reply" else "ticket-state"
    return redirect(url_for("portal.detail", ticket_id=ticket_id, _anchor=anchor), 303)


@bp.route("/<uuid:ticket_id>/reply", methods=["POST"])
@takes_attachments
@requires("inbox.view")
def reply(ticket_id):
    return _act(ticket_id, "reply", {"body": request.form.get("body", "")}, _uploads())


@bp.route("/<uuid:ticket_id>/<any(reopen, cancel):action>", methods=["POST"])
@requires("inbox.view")
def change(ticket_id, action):
    return _act(ticket_id, action, {})


@bp.route("/<uuid:ticket_id>/attachments/<uuid:attachment_id>")
@requires("inbox.view")
def attachment(ticket_id, attachment_id: uuid.UUID):
    from .tickets import download

    with get_db().connection() as conn:
        tenant = _tenant(conn)
        ticket = _own(conn, tenant, ticket_id)
        _messages, attachments = service.public_timeline(conn, tenant["tenant_id"], current_user.id, ticket["id"])
    found = next((a for a in attachments if a["id"] == attachment_id), None)
    if found is None:
        abort(404, _("No such attachment, or it is not yours to see."))
    return download(found)
