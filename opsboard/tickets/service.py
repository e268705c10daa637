"""Tickets: create, act (every workflow action), read, attachments and SLA breach checks.

Every action goes through :func:`act`, which runs inside
:func:`opsboard.audit.operator_action` (one audit row, idempotent by request
key), checks the declared workflow (:mod:`.workflow`) for the caller's role,
writes a ``system`` message for status changes, publishes one outbox event,
and re-plans the SLA breach jobs when a due time moved.

Breach detection: for each due time a ``tickets.sla_check`` job is enqueued
with ``run_at`` = the due time and an idempotency key naming the due time.
When the due time moves (pause/resume, priority change) a new job is planned;
the old one finds its due time stale and does nothing.  No polling.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg
from psycopg.types.json import Jsonb

from .. import audit, db, jobqueue, outbox
from ..auth import Principal, TenantScope
from ..errors import OpsError
from ..storable import storable, unstorable
from ..jobtypes import Field, define
from ..persian import latin_digits, normalize_search
from ..schema import Role, new_id
from . import sla, workflow

MAX_SUBJECT, MAX_BODY = 200, 20000
_CODE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")


@dataclass(frozen=True)
class Caller:
    """Who acts on a ticket, and as which workflow role (admin / support_agent / requester)."""

    user_id: uuid.UUID
    label: str
    #: The agent role this user holds for the ticket's tenant, or None.
    agent_role: str | None = None
    request_id: str | None = None

    @classmethod
    def of(cls, principal: Principal, tenant_id, request_id: str | None = None) -> "Caller":
        return cls(principal.id, principal.email, agent_role(principal, tenant_id), request_id)

    def role_for(self, ticket: dict) -> str | None:
        if self.agent_role:
            return self.agent_role
        if ticket["requester_id"] == self.user_id:
            return "requester"
        return None

    @property
    def actor(self) -> audit.Actor:
        return audit.Actor(label=self.label, id=self.user_id, request_id=self.request_id)


def agent_role(principal: Principal, tenant_id) -> str | None:
    """``admin`` or ``support_agent`` when the user works tickets of ``tenant_id`` (directly or as operator staff)."""
    tid = uuid.UUID(str(tenant_id)) if tenant_id is not None else None
    found = None
    for m in principal.memberships:
        if m.role in (Role.ADMIN, Role.SUPPORT_AGENT) and (m.is_operator or m.tenant_id == tid):
            if m.role == Role.ADMIN:
                return "admin"
            found = "support_agent"
    return found


def _now(now: datetime | None) -> datetime:
    return now or datetime.now(timezone.utc)


def _text(value, name: str, max_len: int) -> str:
    text = (value or "").strip() if isinstance(value, str) else ""
    if not any(unicodedata.category(c)[0] not in "CZ" for c in text):
        raise OpsError("%(field)s is required", name + "_required", status=400, params={"field": name})
    if len(text) > max_len or unstorable(text):
        raise OpsError("%(field)s must be at most %(n)s characters", "invalid_" + name, status=400,
                       params={"field": name, "n": max_len})
    return text


# ---------------------------------------------------------------- policies and categories

def set_policy(conn, tenant_id, priority: str, first_response_minutes: int, resolution_minutes: int, *,
               time_zone: str = "UTC", business_hours: dict | None = None) -> dict:
    """Create or change the tenant's SLA targets for ``priority``."""
    sla.BusinessHours.parse(business_hours, time_zone)
    return db.one(conn, "sla_policy_upsert", {
        "id": new_id(), "tenant_id": tenant_id, "priority": priority, "first_response_minutes": first_response_minutes,
        "resolution_minutes": resolution_minutes, "time_zone": time_zone,
        "business_hours": Jsonb(business_hours) if business_hours else None})


def set_category(conn, tenant_id, slug: str, name: str, *, is_request: bool = False, team: str | None = None) -> dict:
    return db.one(conn, "ticket_category_upsert", {"id": new_id(), "tenant_id": tenant_id, "slug": slug,
                                                   "name": name, "is_request": is_request, "team": team})


def _policy(row: dict | None) -> sla.Policy | None:
    if row is None:
        return None
    return sla.Policy(row["first_response_minutes"], row["resolution_minutes"],
                      sla.BusinessHours.parse(row["business_hours"], row["time_zone"]))


# ---------------------------------------------------------------- events and SLA jobs

def _publish(conn, event: str, ticket: dict, now, **payload) -> dict:
    return outbox.publish(conn, event, 1, aggregate=("ticket", ticket["id"]), tenant=ticket["tenant_id"],
                          payload={"ticket_id": str(ticket["id"]), **payload}, now=now)


def plan_sla_jobs(conn, ticket: dict) -> list[dict]:
    """Enqueue the breach checks for the ticket's current due times (idempotent per due time)."""
    if ticket["status"] not in ("new", "triaged", "in_progress") or ticket["paused_at"] is not None:
        return []
    jobs = []
    for kind, due, done in (("first_response", ticket["first_response_due_at"],
                             ticket["first_responded_at"] or ticket["first_response_breached_at"]),
                            ("resolution", ticket["resolution_due_at"], ticket["resolution_breached_at"])):
        if due is None or done is not None:
            continue
        jobs.append(jobqueue.enqueue(conn, "tickets.sla_check", {"ticket_id": str(ticket["id"]), "kind": kind,
                                                              "due_at": due.isoformat()},
                                  tenant=ticket["tenant_id"], run_at=due,
                                  idempotency_key=f"sla:{ticket['id']}:{kind}:{due.isoformat()}"))
    return jobs


def check_breach(conn, ticket_id, kind: str, due_at: datetime, now: datetime | None = None) -> dict | None:
    """The breach job's work: mark the breach once, if ``due_at`` is still the ticket's due time.

    Writes a system message, an audit row (actor ``system``) and a ``ticket.sla_breached`` event
    (the notifications for the team hang off that event).  Returns the ticket, or None when stale.
    """
    name = {"first_response": "ticket_sla_breach_first_response", "resolution": "ticket_sla_breach_resolution"}[kind]
    with conn.transaction():
        row = db.one(conn, name, {"id": ticket_id, "due_at": due_at, "now": now})
        if row is None:
            return None
        _system_message(conn, row, f"SLA breached: {kind.replace('_', ' ')} was due {due_at:%Y-%m-%d %H:%M} UTC", now)
        audit.record(conn, audit.SYSTEM, "ticket.sla_breach", target_type="ticket", target_id=row["id"],
                     tenant_id=row["tenant_id"], reason=f"{kind} due time passed", after={"kind": kind})
        _publish(conn, "ticket.sla_breached", row, now, kind=kind, team=row["team"] or "")
    return row


# ---------------------------------------------------------------- messages and attachments

def _system_message(conn, ticket: dict, body: str, now) -> dict:
    return db.one(conn, "ticket_message_insert", {"id": new_id(), "tenant_id": ticket["tenant_id"],
                                                  "ticket_id": ticket["id"], "kind": "system", "author_id": None,
                                                  "author_label": "system", "body": body, "now": now})


@dataclass(frozen=True)
class Upload:
    """An uploaded file as received: the name the client gave and the bytes."""

    filename: str
    data: bytes


#: The file name endings each accepted type may have: what the upload forms offer (``accept=``) and
#: check before uploading.  The server goes by the bytes (:func:`sniff`); the name only refuses.
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "image/png": (".png",), "image/jpeg": (".jpg", ".jpeg"), "image/gif": (".gif",), "image/webp": (".webp",),
    "application/pdf": (".pdf",), "text/plain": (".txt", ".log", ".csv"),
}
#: Names a browser or desktop opens as a page or a script once downloaded, whatever the bytes are.
ACTIVE_EXTENSIONS = frozenset({".html", ".htm", ".xhtml", ".shtml", ".mht", ".mhtml", ".svg", ".svgz", ".xml",
                               ".xsl", ".xslt", ".js", ".mjs", ".hta", ".url", ".webloc"})
#: How markup starts (after blanks and a BOM): text that is a web page or an image with scripts.
_MARKUP = re.compile(rb"^(?:\xef\xbb\xbf)?\s*<(?:!doctype\s+html|html|head|body|script|svg|iframe|\?xml|!--)",
                     re.IGNORECASE)


def sniff(data: bytes) -> str | None:
    """The content type read from the bytes (``filetype``); UTF-8 text without NUL is ``text/plain``,
    unless it is markup: ``text/html`` (a page, an SVG or XML document), never accepted as plain text."""
    import filetype

    kind = filetype.guess(data)
    if kind is not None:
        return kind.mime
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return "text/html" if _MARKUP.match(data[:1024]) else "text/plain"
    return None


def accepted_extensions(allowed_types) -> list[str]:
    """The file name endings of the accepted types, for the forms' ``accept=``."""
    return [e for t in allowed_types for e in EXTENSIONS.get(t, ())]


def safe_filename(name: str) -> str:
    base = re.split(r"[\\/]", name or "")[-1]
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C").strip().lstrip(".")
    return storable((base or "attachment")[:255], "an attachment's name")  # category C gone: a no-op


def check_upload(upload: Upload, *, max_bytes: int, allowed_types) -> str:
    """The sniffed content type, or OpsError ``attachment_too_large`` (413) / ``attachment_type_not_allowed`` (415)."""
    if len(upload.data) > max_bytes:
        raise OpsError("%(file)s is larger than %(n)s bytes", "attachment_too_large", status=413,
                       params={"file": safe_filename(upload.filename), "n": max_bytes})
    kind = sniff(upload.data)
    ext = os.path.splitext(safe_filename(upload.filename))[1].lower()
    if ext in ACTIVE_EXTENSIONS:
        # "page.html" would be opened as a web page once saved, whatever type it was stored as.
        kind = "text/html"
    if kind is None or kind not in allowed_types:
        raise OpsError("%(file)s: type %(type)s is not allowed (allowed: %(names)s)", "attachment_type_not_allowed",
                       status=415, params={"file": safe_filename(upload.filename), "type": kind or "unknown",
                                           "names": ", ".join(allowed_types)})
    return kind


def _store_attachments(conn, store, ticket: dict, message: dict, uploads, limits) -> list[dict]:
    rows = []
    for up in uploads or ():
        content_type = check_upload(up, max_bytes=limits[0], allowed_types=limits[1])
        digest = hashlib.sha256(up.data).hexdigest()
        # Stored by content: the same file twice in a tenant is one object.
        key = f"tickets/{ticket['tenant_id']}/{digest[:2]}/{digest}"
        if store.size(key) is None:
            with store.open_write(key) as fh:
                fh.write(up.data)
        rows.append(db.one(conn, "ticket_attachment_insert", {
            "id": new_id(), "tenant_id": ticket["tenant_id"], "ticket_id": ticket["id"], "message_id": message["id"],
            "filename": safe_filename(up.filename), "content_type": content_type, "size_bytes": len(up.data),
            "sha256": digest, "storage_key": key}))
    return rows


# ---------------------------------------------------------------- create

def create_ticket(conn: psycopg.Connection, caller: Caller, *, tenant_id, subject: str, body: str,
                  priority: str = "normal", category: str | None = None, requester_id=None,
                  uploads=(), store=None, limits=(0, ()), round_robin: bool = False,
                  request_key: str | None = None, now: datetime | None = None) -> dict:
    """Open a ticket (status ``new``) with its first message, due times and breach jobs.

    ``requester_id`` defaults to the caller (a customer); an agent may open one for a requester.
    """
    subject = _text(subject, "subject", MAX_SUBJECT)
    body = _text(body, "body", MAX_BODY)
    if priority not in workflow.PRIORITIES:
        raise OpsError("priority must be one of %(names)s", "invalid_priority", status=400,
                       params={"names": ", ".join(workflow.PRIORITIES)})
    at = _now(now)

    def perform(ctx: audit.ActionContext) -> dict:
        cat = None
        if category:
            cat = db.one(conn, "ticket_category_get_by_slug", {"tenant_id": tenant_id, "slug": category})
            if cat is None:
                raise OpsError("no category %(category)s", "invalid_category", status=400,
                               params={"category": repr(category)})
        policy_row = db.one(conn, "sla_policy_get", {"tenant_id": tenant_id, "priority": priority})
        policy = _policy(policy_row)
        due = sla.due_times(policy, at) if policy else None
        number = db.one(conn, "ticket_counter_next", {"tenant_id": tenant_id})["last_number"]
        assignee = None
        if round_robin:
            pick = db.one(conn, "ticket_round_robin_next", {"tenant_id": tenant_id})
            assignee = pick["id"] if pick else None
        ticket = db.one(conn, "ticket_insert", {
            "id": uuid.UUID(ctx.target_id), "tenant_id": tenant_id, "number": number, "subject": subject,
            "category_id": cat["id"] if cat else None, "priority": priority,
            "requester_id": requester_id or caller.user_id, "assignee_id": assignee,
            "team": cat["team"] if cat else None, "sla_policy_id": policy_row["id"] if policy_row else None,
            "first_response_due_at": due.first_response_due_at if due else None,
            "resolution_due_at": due.resolution_due_at if due else None, "now": at})
        message = db.one(conn, "ticket_message_insert", {
            "id": new_id(), "tenant_id": tenant_id, "ticket_id": ticket["id"], "kind": "reply",
            "author_id": caller.user_id, "author_label": caller.label, "body": body, "now": at})
        _store_attachments(conn, store, ticket, message, uploads, limits)
        _system_message(conn, ticket, f"Ticket #{number} opened ({priority})", at)
        ctx.write(tenant_id=tenant_id, after={"status": "new", "number": number, "priority": priority})
        _publish(conn, "ticket.created", ticket, at, priority=priority)
        if assignee:
            _publish(conn, "ticket.assigned", ticket, at, assignee_id=str(assignee))
        plan_sla_jobs(conn, ticket)
        return ticket

    def repeat(previous: dict) -> dict:
        return db.one(conn, "ticket_lock", {"id": uuid.UUID(previous["target_id"]), "scope_all": True,
                                            "scope_ids": []}) or {}

    ticket_id = new_id()
    if request_key:
        previous = audit.find_by_request_key(conn, "ticket.create", request_key)
        if previous is not None:
            ticket_id = uuid.UUID(previous["target_id"])
    return audit.operator_action(conn, caller.actor, "ticket.create", target_type="ticket", target_id=ticket_id,
                                 reason=subject, request_key=request_key, perform=perform, repeat=repeat)


# ---------------------------------------------------------------- act

def act(conn: psycopg.Connection, ticket_id, action: str, caller: Caller, *, scope: TenantScope,
        fields: dict | None = None, reason: str | None = None, request_key: str | None = None,
        uploads=(), store=None, limits=(0, ()), now: datetime | None = None) -> dict:
    """Take one workflow action on a ticket and return the ticket row.

    ``fields`` by action: ``assign`` {assignee_id or None}; ``reply``/``note`` {body};
    ``decide`` {decision, reason}; ``resolve`` {resolution_code, resolution_summary};
    ``set_priority`` {priority}.  Refusals are :class:`OpsError`: ``not_found`` (404, also for a
    ticket outside the caller's reach), ``forbidden`` (403), ``invalid_transition`` (409, with
    ``allowed``), guard codes (400/409).
    """
    fields = dict(fields or {})
    try:
        tid = uuid.UUID(str(ticket_id))
    except ValueError:
        raise OpsError("no such ticket", "not_found") from None
    at = _now(now)
    declared = workflow.ALL.get(action)
    if declared is None:
        raise OpsError("unknown ticket action %(action)s", "unknown_action", params={"action": repr(action)})

    def perform(ctx: audit.ActionContext) -> dict:
        t = db.one(conn, "ticket_lock", {"id": tid, **scope.params})
        role = caller.role_for(t) if t else None
        if t is None or role is None:
            raise OpsError("no such ticket", "not_found")
        tr = workflow.check(action, t["status"], role)
        new = {k: t[k] for k in ("status", "priority", "assignee_id", "sla_policy_id", "first_response_due_at",
                                 "resolution_due_at", "first_responded_at", "paused_at", "paused_seconds",
                                 "decision", "decision_reason", "resolution_code", "resolution_summary",
                                 "resolved_at", "closed_at")}
        policy_row = db.one(conn, "sla_policy_get_by_id", {"id": t["sla_policy_id"]}) if t["sla_policy_id"] else None
        policy = _policy(policy_row)
        event: tuple[str, dict] | None = None
        message = None
        note = None

        if action == "reply" and role == "requester" and t["status"] == "waiting_on_customer":
            tr = workflow.TRANSITIONS["resume"]  # the customer's answer restarts the clock
        if tr.target is not None:
            note = _transition(t, tr, role, fields, new, at, policy)
        if action in ("reply", "note"):
            body = _text(fields.get("body"), "body", MAX_BODY)
            message = db.one(conn, "ticket_message_insert", {
                "id": new_id(), "tenant_id": t["tenant_id"], "ticket_id": t["id"],
                "kind": "reply" if action == "reply" else "internal_note", "author_id": caller.user_id,
                "author_label": caller.label, "body": body, "now": at})
            _store_attachments(conn, store, t, message, uploads, limits)
            if action == "reply" and role != "requester" and new["first_responded_at"] is None:
                new["first_responded_at"] = at
            event = ("ticket.message_added", {"message_id": str(message["id"]),
                                              "visibility": "public" if action == "reply" else "internal"})
        elif action == "assign":
            assignee = fields.get("assignee_id") or None
            if assignee is not None:
                try:
                    assignee = uuid.UUID(str(assignee))
                except ValueError:
                    raise OpsError("assignee must be an agent's id", "invalid_assignee", status=400) from None
                agents = {a["id"] for a in db.all_rows(conn, "ticket_agents_of_tenant", {"tenant_id": t["tenant_id"]})}
                if assignee not in agents:
                    raise OpsError("the assignee is not an active agent of this tenant", "invalid_assignee",
                                   status=400)
            if assignee == t["assignee_id"]:
                raise OpsError("the ticket already has this assignee", "already_assigned", status=409)
            new["assignee_id"] = assignee
            event = ("ticket.assigned", {"assignee_id": str(assignee) if assignee else None})
        elif action == "decide":
            if not t["is_request"]:
                raise OpsError("only a request-type ticket takes a decision", "not_a_request", status=409)
            decision = fields.get("decision")
            if decision not in workflow.DECISIONS:
                raise OpsError("decision must be approved or rejected", "invalid_decision", status=400)
            new["decision"] = decision
            new["decision_reason"] = _text(fields.get("reason"), "decision_reason", 2000)
            event = ("ticket.decided", {"decision": decision})
        elif action == "set_priority":
            priority = fields.get("priority")
            if priority not in workflow.PRIORITIES:
                raise OpsError("priority must be one of %(names)s", "invalid_priority", status=400,
                               params={"names": ", ".join(workflow.PRIORITIES)})
            if priority == t["priority"]:
                raise OpsError("the ticket already has this priority", "invalid_priority", status=400)
            new["priority"] = priority
            policy_row = db.one(conn, "sla_policy_get", {"tenant_id": t["tenant_id"], "priority": priority})
            policy = _policy(policy_row)
            new["sla_policy_id"] = policy_row["id"] if policy_row else None
            _recompute_due(t, new, policy)
            event = ("ticket.priority_changed", {"priority": priority})

        row = db.one(conn, "ticket_update", {"id": t["id"], "now": at, **new})
        if tr.target is not None:
            _system_message(conn, t, note, at)
            status_event = ("ticket.status_changed", {"action": tr.action, "from_status": t["status"],
                                                      "to_status": tr.target})
            if event is None:
                event = status_event
            else:  # a customer's reply that also resumed the clock: both facts are published
                _publish(conn, *status_event[:1], row, at, **status_event[1])
        ctx.write(tenant_id=t["tenant_id"], before=_audit_view(t), after=_audit_view(row))
        _publish(conn, event[0], row, at, **event[1])
        if (row["first_response_due_at"], row["resolution_due_at"], row["paused_at"], row["status"]) != \
                (t["first_response_due_at"], t["resolution_due_at"], t["paused_at"], t["status"]):
            plan_sla_jobs(conn, row)
        return row

    def repeat(previous: dict) -> dict:
        return db.one(conn, "ticket_lock", {"id": tid, **scope.params}) or {}

    return audit.operator_action(conn, caller.actor, f"ticket.{action}", target_type="ticket", target_id=tid,
                                 reason=(reason or "").strip() or declared.label, request_key=request_key,
                                 perform=perform, repeat=repeat)


def _audit_view(t: dict) -> dict:
    return {"status": t["status"], "priority": t["priority"],
            "assignee_id": str(t["assignee_id"]) if t["assignee_id"] else None,
            "decision": t["decision"], "resolution_code": t["resolution_code"]}


def _recompute_due(t: dict, new: dict, policy: sla.Policy | None) -> None:
    if policy is None:
        new["first_response_due_at"] = new["resolution_due_at"] = None
        return
    due = sla.due_times(policy, t["created_at"], new["paused_seconds"])
    new["first_response_due_at"], new["resolution_due_at"] = due.first_response_due_at, due.resolution_due_at


def _transition(t: dict, tr: workflow.Transition, role: str, fields: dict, new: dict, at: datetime,
                policy: sla.Policy | None) -> str:
    """Apply a status change to ``new`` after its guards; returns the system message."""
    if "resolution" in tr.guards:
        code = (fields.get("resolution_code") or "").strip()
        if not _CODE_RE.match(code):
            raise OpsError("a resolution needs a code (letters, digits, - or _)", "resolution_required", status=400)
        new["resolution_code"] = code
        new["resolution_summary"] = _text(fields.get("resolution_summary"), "resolution_summary", 5000)
    if "decision_if_request" in tr.guards and t["is_request"] and new["decision"] is None:
        raise OpsError("a request needs a decision (approved or rejected) before it is resolved",
                       "decision_required", status=409)
    if "reopen_window" in tr.guards:
        if t["resolved_at"] is None or at > t["resolved_at"] + workflow.REOPEN_WINDOW:
            raise OpsError("a ticket can be reopened within %(n)s days of its resolution", "reopen_window_passed",
                           status=409, params={"n": workflow.REOPEN_WINDOW.days})
    was_paused = t["paused_at"] is not None
    new["status"] = tr.target
    if tr.target in ("waiting_on_customer", "resolved"):
        new["paused_at"] = sla.pause(t["paused_at"], at)
    elif tr.target in ("in_progress", "triaged") and was_paused:
        new["paused_seconds"] = int(sla.resume(t["paused_at"], t["paused_seconds"], at,
                                               policy.hours if policy else None))
        new["paused_at"] = None
        if policy is not None:
            _recompute_due(t, new, policy)
    if tr.target == "resolved":
        new["resolved_at"] = at
    elif tr.action == "reopen":
        new["resolved_at"] = None
        new["resolution_code"] = new["resolution_summary"] = None
    if tr.target == "closed":
        new["closed_at"] = at
    text = f"Status {t['status'].replace('_', ' ')} → {tr.target.replace('_', ' ')} ({tr.label.lower()} by {role})"
    if tr.target == "resolved":
        text += f": {new['resolution_code']}"
    return text


# ---------------------------------------------------------------- reads

def get_ticket(conn, scope: TenantScope, ticket_id, now: datetime | None = None) -> dict | None:
    try:
        tid = uuid.UUID(str(ticket_id))
    except ValueError:
        return None
    return db.one(conn, "ticket_get", {"id": tid, "now": now, **scope.params})


def timeline(conn, scope: TenantScope, ticket_id, viewer_id) -> tuple[list[dict], list[dict]]:
    """Messages and attachments the viewer may see (internal notes: agents of the tenant only, in SQL)."""
    params = {"ticket_id": ticket_id, "viewer_id": viewer_id, **scope.params}
    return db.all_rows(conn, "ticket_message_list", params), db.all_rows(conn, "ticket_attachment_list", params)


def public_timeline(conn, tenant_id, requester_id, ticket_id) -> tuple[list[dict], list[dict]]:
    """Messages and attachments for the requester: never an internal note (the query excludes them)."""
    params = {"ticket_id": ticket_id, "tenant_id": tenant_id, "requester_id": requester_id}
    return db.all_rows(conn, "ticket_message_list_public", params), db.all_rows(conn, "ticket_attachment_list_public",
                                                                                params)


QUEUE_FILTERS = ("status", "category", "assignee", "sla", "tenant", "q", "after")
SLA_STATES = ("on_track", "at_risk", "breached", "paused", "met")


def list_queue(conn, scope: TenantScope, *, status: str | None = None, category: str | None = None,
               assignee_id=None, unassigned: bool = False, open_only: bool = False, sla_state: str | None = None,
               tenant_id=None, search: str | None = None, after_id=None, limit: int = 50,
               now: datetime | None = None) -> list[dict]:
    """The agents' queue, newest first, keyset on id (pass the last row's id as ``after_id``)."""
    if status is not None and status not in workflow.STATUSES:
        raise OpsError("status must be one of %(names)s", "invalid_filter",
                       params={"names": ", ".join(workflow.STATUSES)})
    if sla_state is not None and sla_state not in SLA_STATES:
        raise OpsError("sla must be one of %(names)s", "invalid_filter", params={"names": ", ".join(SLA_STATES)})
    # One normalization for the stored column (0015) and the term (issue 14); % and _ match literally.
    search = normalize_search(search).strip() if search else None
    pattern = None
    if search:
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    # A ticket number as people type it: "#3", "3", "#۳" (Persian or Arabic-Indic digits too).
    as_number = latin_digits(search).lstrip("#").strip() if search else ""
    number = int(as_number) if as_number.isascii() and as_number.isdigit() and len(as_number) < 19 else None
    # prepare=False: a prepared statement may switch to a generic plan, which cannot drop the filters
    # left empty: at 1,000,000 tickets such a plan was orders of magnitude slower than one planned
    # with the values (plan_cache_mode=force_generic_plan, `opsboard bench --scenario tickets`).
    return conn.execute(db.queries["ticket_list"], {
        **scope.params, "status": status, "category": category, "assignee_id": assignee_id, "unassigned": unassigned,
        "open_only": open_only, "sla_state": sla_state, "tenant_id": tenant_id, "search": search or None,
        "search_pattern": pattern, "search_number": number,
        "after_id": after_id, "limit": limit, "now": now}, prepare=False).fetchall()


def define_types(cat) -> None:
    """The ticket feature's job type (see :func:`opsboard.tickets.register`)."""
    define(cat, "tickets.sla_check", handler="opsboard.tickets.handlers:sla_check",
           fields={"ticket_id": Field(uuid.UUID), "kind": Field(str, choices=("first_response", "resolution")),
                   "due_at": Field(str, max_length=40)},
           max_attempts=5, timeout=30,
           description="At a ticket's due time: marks the SLA breach once, unless the due time moved or was met.")


def categories(conn, scope: TenantScope) -> list[dict]:
    return db.all_rows(conn, "ticket_category_list", scope.params)


def agents(conn, tenant_id) -> list[dict]:
    return db.all_rows(conn, "ticket_agents_of_tenant", {"tenant_id": tenant_id})


def ensure_requester(conn, email: str, display_name: str = "", tenant_id=None) -> dict:
    """A customer user who opens tickets through the API (created with an unusable random password).

    With ``tenant_id`` the user also gets the ``member`` role in that tenant (an end user: inbox
    only, no ticket or dashboard permission).  That membership is what the customer ticket API
    derives the tenant from, and what the notification policy's ``membership`` rule asks of a
    recipient -- so requesters receive their tickets' notifications.
    """
    from ..auth import hash_password, normalize_email

    email = normalize_email(email)
    user = db.one(conn, "user_get_by_email", {"email": email})
    if user is None:
        user = db.one(conn, "user_insert", {"id": new_id(), "email": email,
                                            "display_name": display_name or email.split("@")[0],
                                            "password_hash": hash_password(secrets.token_urlsafe(24))})
    if tenant_id is not None:
        db.one(conn, "membership_upsert", {"user_id": user["id"], "tenant_id": tenant_id, "role": "member"})
    return user


def customer_tenant(conn, user_id) -> dict:
    """The one tenant a customer ticket API caller acts in: the tenant of their active membership(s).

    Exactly one tenant -> it.  None -> ``no_tenant`` (403); several -> ``tenant_ambiguous`` (403):
    the token carries no tenant, so a user with memberships in several tenants cannot use it
    (give a customer one account per tenant).
    """
    tenants = {m["tenant_id"]: m for m in db.all_rows(conn, "membership_list_for_user", {"user_id": user_id})}
    if not tenants:
        raise OpsError("the token's user has no active membership of a tenant: ask support to add you",
                       "no_tenant", status=403)
    if len(tenants) > 1:
        raise OpsError("the token's user is a member of several tenants; the ticket API needs exactly one",
                       "tenant_ambiguous", status=403)
    return next(iter(tenants.values()))


# ---------------------------------------------------------------- SLA compliance report

def _sla_report_validate(params: dict) -> dict:
    from .. import reports

    if params:
        raise reports.ReportError("unknown parameter(s) %(names)s", "invalid_parameter",
                                  params={"names": ", ".join(sorted(params))})
    return {}


def _sla_report_plan(conn, tenant_id, params: dict, max_rows: int):
    from .. import reports

    # One slice: the rows are (category x priority) groups, a few dozen per tenant.
    yield reports.Slice({}, None, 1)


def _sla_report_rows(conn, tenant_id, params: dict, lower: dict, upper: dict | None):
    for r in db.all_rows(conn, "ticket_sla_compliance_rows", {"tenant_id": tenant_id}):
        breached = r["first_response_breached"] + r["resolution_breached"]
        met = r["tickets"] - min(r["tickets"], breached)
        yield (r["category"], r["priority"], r["tickets"], r["first_response_breached"], r["resolution_breached"],
               f"{100.0 * met / r['tickets']:.1f}" if r["tickets"] else "")


def define_sla_report(cat) -> None:
    """The ticket SLA compliance report kind (see :func:`opsboard.tickets.register`)."""
    from ..persian import marked as _l
    from ..reports import ReportKind, define_kind

    define_kind(cat, ReportKind(
        name="ticket_sla", title=_l("Ticket SLA compliance"),
        columns=("category", "priority", "tickets", "first_response_breached", "resolution_breached",
                 "compliance_percent"),
        params=(), validate=_sla_report_validate, plan=_sla_report_plan, rows=_sla_report_rows,
        filename=lambda p: "ticket-sla-compliance.csv",
        description=_l("Tickets per category and priority, how many breached a due time, and the share that did not.")))
