"""The OpenAPI 3.1 document of /api/v1, kept beside the views it describes.

tests/integration/test_api_schema.py runs schemathesis against it, so a
view that answers something undocumented fails the build.
"""
from __future__ import annotations

import uuid

from ... import __version__, channels, jobtypes, outbox
from ...config import QUEUE_NAMES
from ..tickets import SAFE_DOWNLOAD_TYPES

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_NTIME = {"type": ["string", "null"], "format": "date-time"}


def _error(description: str, *, retry: bool = False, auth: bool = False) -> dict:
    resp: dict = {"description": description,
                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if retry:
        resp["headers"] = {"Retry-After": {"required": True, "description": "Seconds to wait before retrying",
                                           "schema": {"type": "string", "pattern": "^[0-9]+$"}}}
    if auth:
        resp["headers"] = {"WWW-Authenticate": {"required": True, "schema": _STR}}
    return resp


def _json(description: str, schema: str) -> dict:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_ID = [{"name": "id", "in": "path", "required": True, "schema": _STR}]
_WEBHOOK_ERRORS = {
    "400": _error("Malformed request: not a JSON object, a missing, mistyped or unknown field, bad event types, "
                  "a bad Idempotency-Key (`field` names it)"),
    "401": _error("No API key, or an unknown or revoked one", auth=True),
}
_ACTION_BODY = {"required": False, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/WebhookActionRequest"}}}}
_IDEMPOTENT_ACTION = {"name": "Idempotency-Key", "in": "header", "required": False,
                      "description": "Makes the change safe to repeat: the same key answers with the first "
                                     "request's result (a secret is not shown again)",
                      "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"}}


def _webhook_action(op: str, summary: str, conflict: str | None, ok: str = "WebhookEndpoint") -> dict:
    responses = {"200": _json("Done", ok), **_WEBHOOK_ERRORS, "413": _error("Body larger than 1 MiB"),
                 "404": _error("No such endpoint for this tenant (another tenant's is not found either)"),
                 "409": _error(conflict or "The Idempotency-Key was used for another endpoint")}
    return {"operationId": op, "summary": summary, "parameters": _ID + [_IDEMPOTENT_ACTION],
            "requestBody": _ACTION_BODY, "responses": responses}


def _rotate() -> dict:
    op = _webhook_action("rotateWebhookSecret", "A new signing secret, shown this once; the previous one keeps "
                         "signing beside it for overlap_seconds (default 24 hours), then only the new one signs",
                         None)
    op["requestBody"] = {"required": False, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/WebhookRotateRequest"}}}}
    op["responses"]["422"] = _error("overlap_seconds is outside 0 to 604800")
    return op


_WEBHOOK_LINKS = {op: {"operationId": op, "parameters": {"id": "$response.body#/id"}} for op in (
    "getWebhookEndpoint", "deleteWebhookEndpoint", "enableWebhookEndpoint", "disableWebhookEndpoint",
    "rotateWebhookSecret")}


def _replayable(description: str, schema: str) -> dict:
    """A create's success answer: with ``Idempotent-Replayed: true`` when it is the stored first answer."""
    return {"description": description, "headers": {
        "Idempotent-Replayed": {"description": "true when this is the stored answer to an earlier request "
                                               "with the same Idempotency-Key", "schema": {"const": "true"}}},
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_IDEMPOTENCY_409 = "The Idempotency-Key was used with another request (`idempotency_conflict`)"


def _webhook_paths() -> dict:
    return {
        "/webhooks": {
            "get": {"operationId": "listWebhookEndpoints", "summary": "The key's tenant's webhook endpoints",
                    "responses": {"200": _json("The endpoints (never their secrets)", "WebhookEndpointList"),
                                  "401": _WEBHOOK_ERRORS["401"]}},
            "post": {"operationId": "createWebhookEndpoint",
                     "summary": "Register an endpoint; the answer carries its signing secret, shown this once",
                     "parameters": [_IDEMPOTENCY],
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/WebhookEndpointRequest"}}}},
                     "responses": {"201": {**_replayable("Registered (a replay: the first answer, without the "
                                                         "secret)", "WebhookEndpoint"), "links": _WEBHOOK_LINKS},
                                   **_WEBHOOK_ERRORS, "413": _error("Body larger than 1 MiB"),
                                   "409": _error(_IDEMPOTENCY_409 + ", or the endpoint it created was deleted "
                                                 "since (`idempotency_key_resource_gone`: use a new key)"),
                                   "422": _error("The URL's host is a private, loopback or link-local address "
                                                 "(also through DNS), or does not resolve")}}},
        "/webhooks/{id}": {
            "get": {"operationId": "getWebhookEndpoint", "summary": "One endpoint of the key's tenant",
                    "parameters": _ID,
                    "responses": {"200": _json("The endpoint", "WebhookEndpoint"), "401": _WEBHOOK_ERRORS["401"],
                                  "404": _error("No such endpoint for this tenant")}},
            "delete": {**_webhook_action("deleteWebhookEndpoint", "Delete an endpoint; queued deliveries to it "
                                         "are not sent", None, "WebhookDeleted")},
        },
        "/webhooks/{id}/enable": {"post": _webhook_action(
            "enableWebhookEndpoint", "Enable an endpoint again (its circuit breaker starts closed)",
            "The endpoint is enabled already, or the Idempotency-Key was used for another endpoint")},
        "/webhooks/{id}/disable": {"post": _webhook_action(
            "disableWebhookEndpoint", "Disable an endpoint (nothing is delivered to it until enabled)",
            "The endpoint is disabled already, or the Idempotency-Key was used for another endpoint")},
        "/webhooks/{id}/rotate-secret": {"post": _rotate()},
    }


_ENDPOINT_PROPS = {
    "id": {"type": "string", "format": "uuid"}, "tenant_id": {"type": "string", "format": "uuid"},
    "url": _STR, "event_types": {"type": "array", "items": _STR}, "enabled": {"type": "boolean"},
    "disabled_reason": _NSTR, "disabled_at": _NTIME, "description": _STR, "created_at": _NTIME,
    "secret_count": {"type": ["integer", "null"]},
    "previous_secrets_until": {**_NTIME, "description": "after a rotation, the older secret signs beside the "
                                                          "new one until then (null: one secret)"},
    "secret": {"type": "string", "pattern": "^whsec_", "description": "only in the answer that made it"},
}
_WEBHOOK_SCHEMAS = {
    "WebhookEndpointRequest": {"type": "object", "required": ["url"], "additionalProperties": False, "properties": {
        "url": {"type": "string", "minLength": 1, "maxLength": 2000, "pattern": "^https?://[!-~]+$",
                "examples": ["https://example.com/hooks"]},
        "event_types": {"type": "array", "minItems": 1, "maxItems": 50,
                        "items": {"type": "string", "minLength": 1, "maxLength": 100,
                                  "pattern": "^(\\*|[a-z][a-z0-9_]*(\\.[a-z0-9_]+)*)$"},
                        "description": "'*' (every event, the default) or names like order.paid; "
                                       "an empty list or an empty name is refused (400)"},
        "description": {"type": "string", "minLength": 1, "maxLength": 200},
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "description": "kept in the audit log"}}},
    "WebhookActionRequest": {"type": "object", "additionalProperties": False, "properties": {
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "description": "kept in the audit log"}}},
    "WebhookRotateRequest": {"type": "object", "additionalProperties": False, "properties": {
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "description": "kept in the audit log"},
        "overlap_seconds": {"type": "integer", "minimum": 0, "maximum": 604800, "default": 86400,
                            "description": "how long the previous secret keeps signing beside the new one "
                                           "(0: it stops at once)"}}},
    "WebhookEndpoint": {"type": "object", "required": ["id", "url", "event_types", "enabled"],
                        "properties": _ENDPOINT_PROPS},
    "WebhookEndpointList": {"type": "object", "required": ["endpoints"], "properties": {
        "endpoints": {"type": "array", "items": {"$ref": "#/components/schemas/WebhookEndpoint"}}}},
    "WebhookDeleted": {"type": "object", "required": ["id", "deleted"], "properties": {
        "id": {"type": "string", "format": "uuid"}, "deleted": {"const": True}}},
}


def _ok(description: str, schema: str) -> dict:
    return {"description": description, "headers": {
        "Idempotent-Replayed": {"description": "true when this is the stored answer to an earlier request "
                                               "with the same Idempotency-Key", "schema": {"const": "true"}}},
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_POST_ERRORS = {
    "400": _error("Malformed request: not a JSON object, a missing or mistyped field, an unknown field, "
                  "a bad Idempotency-Key (`field` names it)"),
    "401": _error("No API key, or an unknown or revoked one", auth=True),
    "409": _error("The Idempotency-Key was used with another request"),
    "413": _error("Body larger than 1 MiB"),
    "422": _error("Well-formed but refused: unknown type or version, payload outside the type's contract, "
                  "personal data in an undeclared field (`field` names it)"),
    "429": _error("This tenant is over its enqueue rate", retry=True),
    "503": _error("The queue's backlog is over its high-water mark", retry=True),
}

_IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
                "description": "Makes the POST safe to repeat: the same key and body return the first answer "
                               "(`Idempotent-Replayed: true`); the same key with another body answers 409 "
                               "`idempotency_conflict`; a replay after the created resource was deleted answers "
                               "409 `idempotency_key_resource_gone`. Kept 24 hours.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"}}


#: W3C trace context (docs/operations.md, "Traces"): accepted, never refused; a malformed one starts a new trace.
_TRACE_HEADERS = [
    {"name": "traceparent", "in": "header", "required": False,
     "description": "W3C trace context: the trace this request, its event's jobs and their provider calls continue "
                    "(`00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`). A malformed value is ignored.",
     "schema": {"type": "string", "maxLength": 200, "pattern": "^[ -~]*$"}},
    {"name": "tracestate", "in": "header", "required": False,
     "description": "W3C vendor trace state, passed on with `traceparent` (dropped beyond 512 characters).",
     "schema": {"type": "string", "maxLength": 1024, "pattern": "^[ -~]*$"}}]


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_UUID = {"type": "string", "format": "uuid",
         "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}


def _field_schema(spec) -> dict:
    """A job or event field (:class:`opsboard.jobtypes.Field`, ``EventField``) as JSON Schema."""
    types = spec.types if isinstance(spec.types, tuple) else (spec.types,)
    if uuid.UUID in types:
        out: dict = dict(_UUID)
    else:
        names = [_JSON_TYPES[t] for t in types if t in _JSON_TYPES]
        out = {"type": names[0] if len(names) == 1 else names}
    kind = out["type"]
    if spec.max_length is not None and "format" not in out:
        out["maxLength" if "string" in kind else "maxItems" if "array" in kind else "maxProperties"] = spec.max_length
    if getattr(spec, "min_length", None) is not None:
        out["minLength" if "string" in kind else "minItems"] = spec.min_length
    if spec.choices is not None:
        out["enum"] = list(spec.choices)
    if getattr(spec, "pii", False):
        out["description"] = "declared personal data"
    return out


def _payload_schema(fields: dict) -> dict:
    return {"type": "object", "additionalProperties": False,
            "required": [n for n, f in fields.items() if f.required],
            "properties": {n: _field_schema(f) for n, f in fields.items()}}


_JOB_OPTIONS = {
    "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
    "group_key": {"type": "string", "minLength": 1, "maxLength": 200},
    "run_at": {"type": "string", "format": "date-time"},
    "expires_at": {"type": "string", "format": "date-time"},
    "priority": {"type": "integer", "minimum": -32768, "maximum": 32767}, "queue": {"enum": list(QUEUE_NAMES)},
    "max_attempts": {"type": "integer", "minimum": 1},
    "correlation_id": {"type": "string", "minLength": 1, "maxLength": 200}}


def _job_request() -> dict:
    """One branch per public job type version: only these are enqueued over the API (others: 422)."""
    branches = []
    for jt in jobtypes.all_types():
        if not jt.public:
            continue
        payload = _payload_schema(jt.fields) if jt.fields else {
            "type": "object", "description": "any JSON object (the type declares no fields)"}
        branches.append({
            "title": f"{jt.name} v{jt.version}", "description": jt.description,
            "type": "object", "required": ["type", "payload"] + (["version"] if jt.version != 1 else []),
            "additionalProperties": False,
            "properties": {"type": {"const": jt.name}, "version": {"const": jt.version}, "payload": payload,
                           **_JOB_OPTIONS}})
    return {"description": "A public job type (`version` defaults to 1); the payload as its contract allows. "
                           "Internal types are refused (422 `job_type_not_public`).", "oneOf": branches}


def _workflow_paths() -> dict:
    """POST /workflows and GET /workflows/{id} (opsboard.web.api.workflows, issue 45)."""
    task = {"type": "object", "required": ["name", "type", "payload"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200},
                           "type": {"type": "string", "description": "a public job type (as JobRequest)"},
                           "version": {"type": "integer"},
                           "payload": {"type": "object", "description": "as the job type's contract (JobRequest) "
                                                                        "allows"},
                           "deps": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                                    "description": "names of tasks of this workflow that must finish first"},
                           "on_dep_failure": {"enum": ["cancel", "run"],
                                              "description": "a dependency that died or was cancelled: cancel "
                                                             "this task (default) or run it anyway"},
                           **{k: v for k, v in _JOB_OPTIONS.items() if k in ("queue", "priority", "max_attempts")}}}
    request = {"type": "object", "required": ["name", "tasks"], "additionalProperties": False,
               "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200},
                              "tasks": {"type": "array", "minItems": 1, "maxItems": 20000, "items": task},
                              "correlation_id": {"type": "string", "minLength": 1, "maxLength": 200}}}
    workflow = {"type": "object", "required": ["id", "name", "state", "progress", "tasks"], "properties": {
        "id": {"type": "string", "format": "uuid"}, "name": _STR, "kind": {"enum": ["workflow", "batch"]},
        "state": {"enum": ["running", "succeeded", "failed", "cancelled"]},
        "created_at": _STR, "cancelled_at": _NSTR,
        "progress": {"type": "object", "properties": {"done": {"type": "integer"}, "total": {"type": "integer"},
                                                      "failed": {"type": "integer"}}},
        "tasks": {"type": "array", "items": {"type": "object", "required": ["id", "name", "state"], "properties": {
            "id": _STR, "name": _STR, "type": _NSTR,
            "state": {"enum": ["waiting", "ready", "succeeded", "dead", "cancelled", "skipped"]},
            "job_id": _NSTR, "job_status": _NSTR, "deps": {"type": "array", "items": _STR},
            "on_dep_failure": _STR, "last_error_code": _NSTR, "sub_workflow_id": _NSTR,
            "started_at": _NSTR, "finished_at": _NSTR, "result": {}}}}}}
    body = {"application/json": {"schema": workflow}}
    return {
        "/workflows": {"post": {
            "operationId": "createWorkflow",
            "summary": "Insert a workflow (a DAG of jobs of public types) for the key's tenant, atomically. "
                       "Duplicate task names (`duplicate_task`), unknown dependencies (`unknown_dependency`) "
                       "and cycles (`cycle`) are refused (400) before anything is stored",
            "parameters": [_IDEMPOTENCY],
            "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
            "responses": {"202": {"description": "Inserted: its roots are jobs, the other tasks wait",
                                  "content": body,
                                  "links": {"getWorkflow": {"operationId": "getWorkflow",
                                                            "parameters": {"id": "$response.body#/id"}}}},
                          **_POST_ERRORS}}},
        "/workflows/{id}": {"get": {
            "operationId": "getWorkflow",
            "summary": "One workflow of the key's tenant, with its tasks' states",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": _STR}],
            "responses": {"200": {"description": "The workflow", "content": body},
                          "401": _POST_ERRORS["401"],
                          "404": _error("No such workflow for this tenant")}}},
    }


def _event_request() -> dict:
    """One branch per registered (type, version): the payload fields each allows, from the registry."""
    branches = []
    for et in outbox.event_types():
        branches.append({
            "title": f"{et.name} v{et.version}", "description": et.description,
            "type": "object", "required": ["type", "aggregate", "payload"], "additionalProperties": False,
            "properties": {
                "type": {"const": et.name}, "version": {"const": et.version},
                "aggregate": {"type": "object", "required": ["type", "id"], "additionalProperties": False,
                              "properties": {"type": {"const": et.aggregate},
                                             "id": {"type": "string", "minLength": 1, "maxLength": 200}}},
                "payload": _payload_schema(et.fields),
                "correlation_id": {"type": "string", "minLength": 1, "maxLength": 200}}})
    return {"description": "`version` defaults to the type's latest. Payloads carry ids, no personal data: "
                           "an email address, phone number or name in an undeclared field is refused (422).",
            "anyOf": branches}


_TICKET_ERRORS = {
    "400": _error("Malformed request: not JSON or multipart, a missing field (`subject_required`, `body_required`), "
                  "`invalid_priority`, `invalid_category`, a bad Idempotency-Key"),
    "401": _error("No user token (`obu_...`), or an unknown or revoked one", auth=True),
    "403": _error("The token's user has no active tenant membership (`no_tenant`) or several (`tenant_ambiguous`)"),
    "404": _error("No such ticket among the token user's own"),
    "409": _error("The workflow refuses the action (`invalid_transition`, with `allowed`), `reopen_window_passed`, "
                  "or the Idempotency-Key was used with another request (`idempotency_conflict`)"),
    "413": _error("An attachment is larger than OPSBOARD_TICKET_ATTACHMENT_MAX_BYTES, or the body is too large"),
    "415": _error("An attachment's sniffed type is not allowed"),
}
_TICKET_ID = {"name": "ticket_id", "in": "path", "required": True, "schema": _STR}
_TIME = {"type": "string", "format": "date-time"}
_PRIORITIES = ["low", "normal", "high", "urgent"]
_TICKET_SUMMARY = {
    "id": {"type": "string", "format": "uuid"}, "number": {"type": "integer"}, "subject": _STR,
    "status": {"enum": ["new", "triaged", "in_progress", "waiting_on_customer", "resolved", "closed", "cancelled"]},
    "priority": {"enum": _PRIORITIES}, "category": _NSTR, "created_at": _TIME, "updated_at": _TIME}
_TICKET_SCHEMAS = {
    "TicketSummary": {"type": "object", "additionalProperties": False, "required": list(_TICKET_SUMMARY),
                      "properties": _TICKET_SUMMARY},
    "Ticket": {"type": "object", "additionalProperties": False,
               "required": [*_TICKET_SUMMARY, "resolution_code", "resolution_summary", "decision", "messages",
                            "attachments"],
               "properties": {**_TICKET_SUMMARY, "resolution_code": _NSTR, "resolution_summary": _NSTR,
                              "decision": {"enum": ["approved", "rejected", None]},
                              "messages": {"type": "array", "description": "public messages only, oldest first",
                                           "items": {"type": "object", "additionalProperties": False,
                                                     "required": ["id", "kind", "author", "body", "created_at"],
                                                     "properties": {"id": {"type": "string", "format": "uuid"},
                                                                    "kind": _STR, "author": _NSTR, "body": _NSTR,
                                                                    "created_at": _TIME}}},
                              "attachments": {"type": "array", "items": {
                                  "type": "object", "additionalProperties": False,
                                  "required": ["id", "message_id", "filename", "content_type", "size", "sha256"],
                                  "properties": {"id": {"type": "string", "format": "uuid"},
                                                 "message_id": {"type": "string", "format": "uuid"},
                                                 "filename": _STR, "content_type": _STR, "size": {"type": "integer"},
                                                 "sha256": _STR}}}}},
    "TicketList": {"type": "object", "additionalProperties": False, "required": ["tickets", "next_after"],
                   "properties": {"tickets": {"type": "array", "items": {"$ref": "#/components/schemas/TicketSummary"}},
                                  "next_after": {"type": ["string", "null"], "format": "uuid",
                                                 "description": "pass as `after` for the next page"}}},
    "TicketRequest": {"type": "object", "required": ["subject", "body"], "properties": {
        "subject": {"type": "string", "minLength": 1, "maxLength": 200}, "body": {"type": "string", "minLength": 1},
        "priority": {"enum": _PRIORITIES, "default": "normal"},
        "category": {"type": "string", "description": "a category slug of the tenant"}}},
    "TicketReplyRequest": {"type": "object", "required": ["body"], "properties": {
        "body": {"type": "string", "minLength": 1}}},
}
_FILES = {"files": {"type": "array", "items": {"type": "string", "format": "binary"}}}


def _ticket_body(schema: str) -> dict:
    fields = _TICKET_SCHEMAS[schema]
    return {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}},
        "multipart/form-data": {"schema": {"type": "object", "required": fields["required"],
                                           "properties": {**fields["properties"], **_FILES}}}}}


def _ticket(description: str) -> dict:
    return _json(description + " (messages without internal notes, attachments)", "Ticket")


_TICKET_LINKS = {
    "getTicket": {"operationId": "getTicket", "parameters": {"ticket_id": "$response.body#/id"}},
    "replyTicket": {"operationId": "replyTicket", "parameters": {"ticket_id": "$response.body#/id"}},
    "reopenTicket": {"operationId": "reopenTicket", "parameters": {"ticket_id": "$response.body#/id"}},
}
#: Attachment types sent as themselves (with Content-Disposition: attachment and nosniff); every other
#: stored type is sent as application/octet-stream (opsboard.web.tickets.SAFE_DOWNLOAD_TYPES).
_DOWNLOAD_TYPES = ("application/octet-stream", *sorted(SAFE_DOWNLOAD_TYPES))


def _ticket_paths() -> dict:
    """The customer ticket API (opsboard.web.api.tickets): user bearer tokens, not API keys."""
    errors = {k: _TICKET_ERRORS[k] for k in ("401", "404")}
    paths = {
        "/tickets": {
            "post": {"operationId": "createTicket", "summary": "Open a ticket (JSON, or multipart with files)",
                     "parameters": [_IDEMPOTENCY], "requestBody": _ticket_body("TicketRequest"),
                     "responses": {"201": {**_ticket("Opened"), "links": _TICKET_LINKS},
                                   **{k: v for k, v in _TICKET_ERRORS.items() if k != "404"}}},
            "get": {"operationId": "listTickets", "summary": "The token user's own tickets, newest first",
                    "parameters": [{"name": "after", "in": "query", "required": False,
                                    "schema": {"type": "string", "format": "uuid"}},
                                   {"name": "limit", "in": "query", "required": False,
                                    "schema": {"type": "integer", "minimum": 1, "maximum": 200}}],
                    "responses": {"200": _json("A page", "TicketList"),
                                  "400": _error("`after` is not a ticket id or `limit` not a number "
                                                "(`invalid_filter`)"),
                                  "401": _TICKET_ERRORS["401"]}}},
        "/tickets/{ticket_id}": {"get": {
            "operationId": "getTicket", "summary": "One own ticket, without internal notes",
            "parameters": [_TICKET_ID], "responses": {"200": _ticket("The ticket"), **errors}}},
        "/tickets/{ticket_id}/replies": {"post": {
            "operationId": "replyTicket", "summary": "Reply (resumes a ticket waiting on the customer)",
            "parameters": [_TICKET_ID, _IDEMPOTENCY], "requestBody": _ticket_body("TicketReplyRequest"),
            "responses": {"201": {**_ticket("Replied"), "headers": _replayable("", "Ticket")["headers"]},
                          **_TICKET_ERRORS}}},
        "/tickets/{ticket_id}/reopen": {"post": {
            "operationId": "reopenTicket", "summary": "Reopen a resolved ticket within the window",
            "parameters": [_TICKET_ID, _IDEMPOTENCY],
            "responses": {"200": _ticket("Reopened"), **{k: _TICKET_ERRORS[k] for k in ("400", "401", "404", "409")}}}},
        "/tickets/{ticket_id}/attachments/{attachment_id}": {"get": {
            "operationId": "getTicketAttachment",
            "summary": "Download an attachment (Content-Disposition: attachment, X-Content-Type-Options: nosniff); "
                       "sent as application/octet-stream unless its type is an image or PDF",
            "parameters": [_TICKET_ID, {"name": "attachment_id", "in": "path", "required": True, "schema": _STR}],
            "responses": {"200": {"description": "The file", "headers": {
                "Content-Disposition": {"required": True, "schema": {"type": "string", "pattern": "^attachment"}},
                "X-Content-Type-Options": {"required": True, "schema": {"const": "nosniff"}}},
                "content": {t: {"schema": {"type": "string", "format": "binary"}} for t in _DOWNLOAD_TYPES}},
                **errors}}},
    }
    for operations in paths.values():
        for op in operations.values():
            op["security"] = [{"userToken": []}]
            op["responses"]["403"] = _TICKET_ERRORS["403"]
    return paths


_INBOX_401 = _error("No user token (`obu_...`: `opsboard user-token --email ...`), or an unknown or revoked one",
                    auth=True)
_INBOX_403 = _error("The token's user has no active membership of a tenant (`no_membership`)")
_NOTIFICATION_ID = {"name": "notification_id", "in": "path", "required": True, "schema": _STR}
_NOTIFICATION_PROPS = {
    "id": {"type": "string", "format": "uuid"}, "cursor": {"type": "integer", "minimum": 0},
    "event_type": _STR, "category": _NSTR, "title": _NSTR, "locale": _NSTR, "created_at": _TIME,
    "seen_at": _NTIME, "read_at": _NTIME, "archived_at": _NTIME}
_INBOX_SCHEMAS = {
    "Notification": {"type": "object", "additionalProperties": False,
                     "required": [*_NOTIFICATION_PROPS, "body", "data"],
                     "properties": {**_NOTIFICATION_PROPS, "body": _NSTR,
                                    "data": {"type": ["object", "null"],
                                             "description": "the template's link and ids (no personal data)"},
                                    "deliveries": {
                                        "type": "object", "description":
                                        "Only in GET /inbox/{notification_id}: the delivery state of each "
                                        "channel it went to (see docs/deliveries.md, Delivery states)",
                                        # The enums are the catalogue's (opsboard.channels), set by
                                        # _with_channels when the document is built.
                                        "propertyNames": {"enum": []},
                                        "additionalProperties": {"enum": []}}}},
    "InboxPage": {"type": "object", "additionalProperties": False, "required": ["items", "next_cursor", "unread"],
                  "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Notification"}},
                                 "next_cursor": {"type": ["integer", "null"], "minimum": 0},
                                 "unread": {"type": "integer", "minimum": 0}}},
    "InboxUnread": {"type": "object", "additionalProperties": False, "required": ["unread"],
                    "properties": {"unread": {"type": "integer", "minimum": 0}}},
    "NotificationState": {"type": "object", "additionalProperties": False,
                          "required": ["id", "seen", "read", "archived", "unread"],
                          "properties": {"id": {"type": "string", "format": "uuid"}, "seen": {"type": "boolean"},
                                         "read": {"type": "boolean"}, "archived": {"type": "boolean"},
                                         "unread": {"type": "integer", "minimum": 0}}},
    "DeviceRequest": {"type": "object", "required": ["endpoint", "keys"], "description": "A browser's "
                      "PushSubscription (`subscription.toJSON()`)", "properties": {
                          "endpoint": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2000,
                                       "examples": ["https://push.example.com/send/abc"]},
                          "expirationTime": {"type": ["number", "null"]},
                          "keys": {"type": "object", "required": ["p256dh", "auth"], "properties": {
                              "p256dh": {"type": "string", "minLength": 1, "maxLength": 200},
                              "auth": {"type": "string", "minLength": 1, "maxLength": 200}}}}},
    "Profile": {"type": "object", "additionalProperties": False, "required": ["locale", "effective_locale"],
                "properties": {"locale": {"enum": ["fa", "en", None], "description": "the user's own choice; "
                                          "null: the tenant's default"},
                               "effective_locale": {"enum": ["fa", "en"], "description": "the language the "
                                                    "user's notifications are written in now"}}},
    "ProfileUpdate": {"type": "object", "additionalProperties": False, "required": ["locale"],
                      "properties": {"locale": {"enum": ["fa", "en", None]}}},
    "Device": {"type": "object", "additionalProperties": False, "required": ["id", "state"],
               "properties": {"id": {"type": "string", "format": "uuid"},
                              "state": {"enum": ["active", "invalid", "revoked"]}}},
}


def _inbox_paths() -> dict:
    """The end user's inbox and devices (opsboard.web.api.inbox): user bearer tokens, not API keys."""
    cursor = {"in": "query", "required": False, "schema": {"type": "integer", "minimum": 0}}
    paths = {
        "/inbox": {"get": {
            "operationId": "listInbox", "summary": "The user's notifications, newest first (cursor: older; "
                                                   "since: newer, for a re-sync after a missed push or SSE)",
            "parameters": [{"name": "cursor", **cursor}, {"name": "since", **cursor},
                           {"name": "limit", **cursor},
                           {"name": "archived", "in": "query", "required": False, "schema": {"enum": ["0", "1"]}}],
            "responses": {"200": _json("A page: items, next_cursor, unread", "InboxPage"),
                          "400": _error("A cursor that is not a number, or both cursor and since")}}},
        "/inbox/unread": {"get": {
            "operationId": "inboxUnread", "summary": "The unread count (the badge)",
            "responses": {"200": _json("The unread count", "InboxUnread")}}},
        "/inbox/stream": {"get": {
            "operationId": "inboxStream", "summary": "Server-sent events: new inbox rows live; event ids are inbox "
                                                     "cursors, Last-Event-ID resumes from the inbox",
            "responses": {"200": {"description": "text/event-stream", "content": {"text/event-stream": {
                              "schema": {"type": "string"}}}},
                          "400": _error("A Last-Event-ID that is not a cursor"),
                          "429": _error("Too many open streams for this user", retry=True)}}},
        "/inbox/{notification_id}": {"get": {
            "operationId": "getNotification", "summary": "One notification with its full text (fetched after a "
                                                         "push, which carries no sensitive text)",
            "parameters": [_NOTIFICATION_ID],
            "responses": {"200": _json("The notification", "Notification"),
                          "404": _error("No such notification of this user")}}},
        "/inbox/{notification_id}/{state}": {"post": {
            "operationId": "markNotification", "summary": "Mark seen, read or archived (read state, separate "
                                                          "from delivery state)",
            "parameters": [_NOTIFICATION_ID, {"name": "state", "in": "path", "required": True,
                                              "schema": {"enum": ["seen", "read", "archived"]}}],
            "responses": {"200": _json("The new read state and the unread count", "NotificationState"),
                          "404": _error("No such notification, or an unknown state")}}},
        "/devices": {"post": {
            "operationId": "registerDevice", "summary": "Register a Web Push subscription for the user",
            "parameters": [_IDEMPOTENCY],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/DeviceRequest"}}}},
            "responses": {"201": {**_replayable("The subscription", "Device"), "links": {
                              "unregisterDevice": {"operationId": "unregisterDevice",
                                                   "parameters": {"subscription_id": "$response.body#/id"}}}},
                          "400": _error("Not a JSON object, or not a Web Push subscription (endpoint, keys.p256dh, "
                                        "keys.auth), or its endpoint is refused (a private, loopback or link-local "
                                        "address): `invalid_subscription`"),
                          "409": _error("The push endpoint is registered to another user (`device_taken`), "
                                        "or the Idempotency-Key was used with another request (`idempotency_conflict`), or the "
                                        "device it registered was "
                                        "unregistered since (`idempotency_key_resource_gone`: use a new key)"),
                          "413": _error("Body larger than 1 MiB")}}},
        "/profile": {
            "get": {"operationId": "getProfile", "summary": "The language of the user's notifications (issue 43)",
                    "responses": {"200": _json("The user's choice and the language in force", "Profile")}},
            "patch": {"operationId": "updateProfile",
                      "summary": "Choose the language of the user's notifications: fa, en, or null (the tenant's "
                                 "default, then fa); audited",
                      "requestBody": {"required": True, "content": {"application/json": {
                          "schema": {"$ref": "#/components/schemas/ProfileUpdate"}}}},
                      "responses": {"200": _json("The user's choice and the language in force", "Profile"),
                                    "400": _error("Not a JSON object, no `locale`, an unknown field "
                                                  "(`unknown_field`), or a language other than fa and en "
                                                  "(`invalid_locale`)")}}},
        "/devices/{subscription_id}": {"delete": {
            "operationId": "unregisterDevice", "summary": "Unregister one of the user's subscriptions",
            "parameters": [{"name": "subscription_id", "in": "path", "required": True, "schema": _STR}],
            "responses": {"200": _json("The subscription, revoked", "Device"),
                          "404": _error("No such subscription of this user")}}},
    }
    for operations in paths.values():
        for op in operations.values():
            op["security"] = [{"userToken": []}]
            op["responses"].update({"401": _INBOX_401, "403": _INBOX_403})
    return paths


def _with_channels(schemas: dict) -> dict:
    """The inbox schemas with the active catalogue's channels and their delivery states as enums (an
    extension's channel included)."""
    note = dict(schemas["Notification"])
    props = dict(note["properties"])
    deliveries = dict(props["deliveries"])
    chans = channels.channels()
    deliveries["propertyNames"] = {"enum": [c.name for c in chans]}
    reached = {s for c in chans for s in c.states}
    deliveries["additionalProperties"] = {"enum": [s for s in channels.DELIVERY_STATES if s in reached]}
    props["deliveries"] = deliveries
    note["properties"] = props
    return {**schemas, "Notification": note}


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "opsboard producer API", "version": __version__,
                 "description": "Publish outbox events, enqueue jobs and read their status, request and verify OTPs. "
                                "Every answer is JSON; errors are `{error, message, field?}`. Under overload "
                                "the API answers 429 or 503 with Retry-After instead of waiting."},
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "paths": {
            "/events": {"post": {
                "operationId": "publishEvent",
                "summary": "Publish an event for the key's tenant (relayed to its subscribers' jobs)",
                "parameters": [_IDEMPOTENCY, *_TRACE_HEADERS],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/EventRequest"}}}},
                "responses": {"202": _ok("Stored; the relay turns it into jobs", "Event"), **_POST_ERRORS}}},
            "/jobs": {"post": {
                "operationId": "enqueueJob",
                "summary": "Enqueue a job of a registered type for the key's tenant",
                "parameters": [_IDEMPOTENCY, *_TRACE_HEADERS],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/JobRequest"}}}},
                "responses": {"202": {**_ok("Enqueued (or the live job already holding idempotency_key)", "Job"),
                                      "links": {"getJob": {"operationId": "getJob",
                                                           "parameters": {"id": "$response.body#/id"}}}},
                              **_POST_ERRORS}}},
            "/jobs/{id}": {"get": {
                "operationId": "getJob",
                "summary": "One job of the key's tenant",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": _STR}],
                "responses": {
                    "200": {"description": "The job", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Job"}}}},
                    "401": _POST_ERRORS["401"],
                    "404": _error("No such job for this tenant (another tenant's job is not found either)")}}},
            **_workflow_paths(),
            **_webhook_paths(),
            "/otp": {"post": {
                "operationId": "requestOtp",
                "summary": "Send a one-time password by SMS (critical queue; expires after 2 minutes)",
                "parameters": [_IDEMPOTENCY],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/OtpRequest"}}}},
                "responses": {"202": {**_ok("Requested: the code's SMS is enqueued (`sms.otp`, expiring with the "
                                            "code) to the phone given", "Otp"),
                                      "links": {"verifyOtp": {"operationId": "verifyOtp",
                                                              "parameters": {"otp_id": "$response.body#/otp_id"}},
                                                "getJob": {"operationId": "getJob",
                                                           "parameters": {"id": "$response.body#/job_id"}}}},
                              **_POST_ERRORS}}},
            "/otp/{otp_id}/verify": {"post": {
                "operationId": "verifyOtp",
                "summary": "Check a code of an OTP of the key's tenant. Every call counts one attempt (at most "
                           "5, the right one included); the right code is accepted once. Not rate-admitted and "
                           "no Idempotency-Key: an attempt is never replayed",
                "parameters": [{"name": "otp_id", "in": "path", "required": True, "schema": _STR}],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/OtpVerifyRequest"}}}},
                "responses": {
                    "200": _json("Checked: `verified` is true for the right code (the OTP is then used up), "
                                 "false for a wrong one", "OtpVerification"),
                    "400": _error("Malformed request: not a JSON object, a missing, mistyped or unknown field "
                                  "(`field` names it)"),
                    "401": _POST_ERRORS["401"],
                    "404": _error("No such OTP for this tenant (another tenant's is not found either)"),
                    "410": _error("The OTP can no longer be verified: `otp_expired` (past expires_at), "
                                  "`otp_used` (verified already) or `otp_attempts_exhausted` (5 attempts made)"),
                    "413": _POST_ERRORS["413"],
                    "422": _error("The code is not 6 digits (`field`: code)")}}},
            **_ticket_paths(),
            **_inbox_paths(),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "An API key: `opsboard apikey create --tenant SLUG`"},
                                "userToken": {"type": "http", "scheme": "bearer",
                                              "description": "An end user's token `obu_...` (inbox and "
                                                             "customer tickets): `opsboard user-token --email E "
                                                             "--tenant SLUG`; the ticket API acts in the user's "
                                                             "one tenant"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error", "message"], "properties": {
                    "error": {"type": "string", "description": "stable code, e.g. personal_data"},
                    "message": _STR,
                    "field": {"type": "string", "description": "the offending field, e.g. payload.email"}}},
                "EventRequest": _event_request(),
                "Event": {"type": "object", "required": ["id", "type", "version", "aggregate", "occurred_at"],
                          "properties": {
                    "id": {"type": "string", "format": "uuid"}, "type": _STR, "version": {"type": "integer"},
                    "aggregate": {"type": "object", "required": ["type", "id"],
                                  "properties": {"type": _STR, "id": _STR}},
                    "occurred_at": {"type": "string", "format": "date-time"}, "correlation_id": _NSTR,
                    "redacted_fields": {"type": "array", "items": _STR, "description": "payload fields whose personal data was replaced by the mask (tenant pii_mode redact)"}}},
                "JobRequest": _job_request(),
                "Job": {"type": "object", "required": ["id", "type", "version", "status", "queue"], "properties": {
                    "id": {"type": "string", "format": "uuid"}, "type": _STR, "version": {"type": "integer"},
                    "status": {"enum": ["pending", "running", "succeeded", "retryable", "dead", "cancelled"]},
                    "queue": {"enum": ["critical", "default", "bulk"]}, "priority": {"type": "integer"},
                    "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"},
                    "idempotency_key": _NSTR, "group_key": _NSTR, "correlation_id": _NSTR, "event_id": _NSTR,
                    "last_error_code": _NSTR, "created_at": _NTIME, "available_at": _NTIME,
                    "started_at": _NTIME, "finished_at": _NTIME, "expires_at": _NTIME,
                    "payload": {"type": "object", "description": "as the job type's contract (JobRequest) allows"},
                    "redacted_fields": {"type": "array", "items": _STR, "description": "payload fields whose personal data was replaced by the mask (tenant pii_mode redact)"}}},
                "OtpRequest": {"type": "object", "required": ["phone"], "additionalProperties": False,
                               "properties": {
                    "phone": {"type": "string", "pattern": "^\\+[1-9][0-9]{7,14}$", "examples": ["+393471234567"]},
                    "correlation_id": {"type": "string", "minLength": 1, "maxLength": 200}}},
                **_WEBHOOK_SCHEMAS, **_TICKET_SCHEMAS, **_with_channels(_INBOX_SCHEMAS),
                "Otp": {"type": "object", "required": ["otp_id", "expires_at", "message_id", "job_id"],
                        "properties": {
                    "otp_id": {"type": "string", "format": "uuid"},
                    "expires_at": {"type": "string", "format": "date-time"},
                    "message_id": {"type": "string", "format": "uuid", "description": "the SMS (outbound message)"},
                    "job_id": {"type": "string", "format": "uuid",
                               "description": "its `sms.otp` job (GET /jobs/{id}): critical queue, expiring"}}},
                "OtpVerifyRequest": {"type": "object", "required": ["code"], "additionalProperties": False,
                                     "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$",
                                                             "examples": ["123456"]}}},
                "OtpVerification": {"type": "object", "required": ["verified"],
                                    "properties": {"verified": {"type": "boolean"}}},
            },
        },
    }
