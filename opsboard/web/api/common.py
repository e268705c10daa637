"""What every /api/v1 view shares: bearer keys, JSON bodies, errors with a
field, admission (backpressure) and Idempotency-Key replay.

A POST view hands :func:`respond` the validated request and a function doing
the work on a connection inside one transaction; ``respond`` asks the core's
admission (429/503 with Retry-After, decided in one statement of its own,
never a wait) together with the Idempotency-Key's stored answer (replaying the
first answer, or 409 for another body), then runs the work and stores its
answer in one transaction, giving the token back when nothing is stored.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
from typing import Any, Callable

import psycopg
from flask import g, jsonify, request
from psycopg.types.json import Jsonb

from ... import apikeys, backpressure, db, tenancy
from ..security import scope_to
from ...storable import unstorable
from ..context import get_config, get_db, request_id


class Problem(Exception):
    """An API refusal: ``{"error": code, "message": ..., "field": ...}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.field, self.headers = status, code, message, field, headers or {}

    def response(self):
        body = {"error": self.code, "message": self.message}
        if self.field:
            body["field"] = self.field
        resp = jsonify(body)
        resp.status_code = self.status
        resp.headers.update(self.headers)
        return resp


def authenticate() -> dict:
    """The caller's API key (``id``, ``tenant_id``, ``tenant_slug``), or 401."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Problem(401, "unauthorized", "Send an API key: Authorization: Bearer obk_...",
                      headers={"WWW-Authenticate": 'Bearer realm="opsboard"'})
    database = get_db()
    with tenancy.bypass(tenancy.Bypass.AUTHENTICATION):
        key = apikeys.authenticate_cached(database.connection, secret.strip(), database.url)
    if key is None:
        raise Problem(401, "unauthorized", "The API key is unknown or revoked.",
                      headers={"WWW-Authenticate": 'Bearer realm="opsboard", error="invalid_token"'})
    g.api_key = key
    scope_to([key["tenant_id"]])  # the database lets this request see its key's tenant only
    return key


#: Deepest nesting of arrays and objects a JSON body may have: every body the API takes is a few levels deep.
MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in ``raw``, brackets inside strings not counted (no parsing)."""
    depth = deepest = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", raw)):
        if m.group() in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def refuse_deep_json() -> None:
    """400 ``json_too_deep`` for a JSON body nested deeper than :data:`MAX_JSON_DEPTH` (a before_request)."""
    if request.is_json and request.content_length != 0 and request.method in ("POST", "PUT", "PATCH", "DELETE"):
        raw = request.get_data(cache=True)
        # Fewer brackets than the limit cannot nest deeper than it: two C counts instead of the scan.
        if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and json_depth(raw) > MAX_JSON_DEPTH:
            raise Problem(400, "json_too_deep", f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep.",
                          "body")


def json_object() -> dict:
    """The request body as a JSON object, or 400."""
    if not request.is_json:
        raise Problem(400, "invalid_json", "Send a JSON object with Content-Type: application/json.", "body")
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Problem(400, "invalid_json", "The body must be a JSON object.", "body")
    return body


_MISSING = object()


def field(body: dict, name: str, types, *, required: bool = True, default: Any = None,
          max_length: int | None = None, where: str | None = None) -> Any:
    """One top-level field of ``body``, type-checked (400 ``invalid_field`` naming it)."""
    value = body.get(name, _MISSING)
    where = where or name
    if value is _MISSING or value is None:
        if required:
            raise Problem(400, "missing_field", f"{where} is required.", where)
        return default
    types = types if isinstance(types, tuple) else (types,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        names = {str: "a string", int: "an integer", dict: "an object", bool: "a boolean"}
        raise Problem(400, "invalid_field", f"{where} must be {' or '.join(names.get(t, t.__name__) for t in types)}.",
                      where)
    if isinstance(value, str):
        if unstorable(value):
            raise Problem(400, "invalid_field", f"{where} holds a NUL character or a lone surrogate.", where)
        if max_length is not None and not 0 < len(value) <= max_length:
            raise Problem(400, "invalid_field", f"{where} must be 1 to {max_length} characters.", where)
    return value


def only_fields(body: dict, allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Problem(400, "unknown_field", f"Unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}.",
                      unknown[0])


_KEY_RE = re.compile(r"^[\x21-\x7e]{1,200}$")


def idempotency_key() -> str | None:
    """The request's Idempotency-Key header (None without one), or 400."""
    idem = request.headers.get("Idempotency-Key")
    if idem is not None and not _KEY_RE.match(idem):
        raise Problem(400, "invalid_idempotency_key",
                      "Idempotency-Key must be 1 to 200 printable ASCII characters.", "Idempotency-Key")
    return idem


def respond(key: dict, body: dict, queue: str, work: Callable[[psycopg.Connection], tuple[int, dict]]):
    """Run ``work`` under admission and Idempotency-Key semantics; returns the Flask response.

    Admission (the queue's mark, the tenant's token) is one statement in a short transaction of its
    own, committed without waiting for its WAL flush (:func:`opsboard.outbox.publish.take_admission`,
    the same as ``POST /events``): the tenant's bucket row is locked for that statement only, never
    through the work's insert and durable commit, which serialized one tenant's concurrent requests
    on the disk's flush time.  With an Idempotency-Key the same statement reads the key's stored
    answer, and then takes no token.  A request that took a token and then stores nothing (its work
    fails: 4xx or 5xx, or a concurrent request with the same key wins) gives the token back.
    """
    from ...outbox.publish import refund_token, take_admission
    tenant_id = key["tenant_id"]
    adm = backpressure.admission_params(tenant_id, queue, high_water=get_config().high_water)

    def admit(conn, stored_key):
        row = take_admission(conn, adm, stored_key)
        if row["prior_hash"] is not None:
            return {"request_hash": row["prior_hash"], "status": row["prior_status"],
                    "response": row["prior_response"]}
        verdict = backpressure.admission_verdict(row, queue, adm["mark"])
        if not verdict.accepted:
            raise Problem(verdict.status, verdict.code, verdict.message, headers=verdict.headers())
        g.admitted_at = verdict.at  # the admission's clock: views may write it instead of reading it back
        return None

    return idempotent(tenant_id, body, work, admit=admit, refund=lambda conn: refund_token(conn, adm["name"]))


def idempotent(tenant_id, body, work: Callable[[psycopg.Connection], tuple[int, dict]], *, namespace: str = "",
               admit: Callable[[psycopg.Connection, str | None], dict | None] | None = None,
               refund: Callable[[psycopg.Connection], None] | None = None, not_replayed: tuple[str, ...] = (),
               still_there: Callable[[psycopg.Connection, dict], bool] | None = None):
    """The one Idempotency-Key helper of every create endpoint: run ``work`` in one transaction and, with
    a key, remember its answer.  The same key with the same body (and method and path) answers the
    stored answer with ``Idempotent-Replayed: true``; with another body, 409 ``idempotency_conflict``.

    ``body`` is what identifies the request (the JSON body, or form fields and upload digests);
    ``namespace`` separates keys of different callers of one tenant (a user token's user id);
    fields named in ``not_replayed`` (a secret shown once) are not stored, so a replay lacks them.

    ``admit(conn, stored key or None)``, when given, runs before the transaction in place of the
    stored-answer lookup: it returns the key's stored answer (a row with ``request_hash``, ``status``
    and ``response``) or None, or raises a refusal; ``refund(conn)`` undoes what it took when the
    transaction then stores nothing (it raised, or a concurrent request with the same key won).

    ``still_there(conn, stored answer)`` says whether the resource the first request created
    still exists; when it was deleted since, a replay answers 409 ``idempotency_key_resource_gone``
    instead of a 201 for something that is not there (and a link that would answer 404): the key
    is spent, a new one creates again.  Endpoints whose resources cannot be deleted pass nothing.
    """
    idem = idempotency_key()
    digest = None
    stored_key = None
    if idem is not None:
        stored_key, digest = idempotency_digest(idem, body, namespace)
    database = get_db()
    with database.connection() as conn:
        if admit is not None:
            stored = admit(conn, stored_key)
        elif idem is not None:
            stored = db.one(conn, "api_idempotency_get", {"tenant_id": tenant_id, "key": stored_key})
        else:
            stored = None
        if stored is not None:
            return _replay(stored, digest, conn, still_there)
        try:
            # Pipeline mode: BEGIN travels with the first statement of the work, saving a round trip.
            with (conn.pipeline() if admit is not None else contextlib.nullcontext()), conn.transaction():
                if idem is not None:
                    # Waits for a concurrent request holding the same key to finish.
                    if db.one(conn, "api_idempotency_claim", {"tenant_id": tenant_id, "key": stored_key,
                                                              "request_hash": digest}) is None:
                        stored = db.one(conn, "api_idempotency_get", {"tenant_id": tenant_id, "key": stored_key})
                if stored is None:
                    status, answer = work(conn)
                    if idem is not None:
                        db.execute(conn, "api_idempotency_store", {
                            "tenant_id": tenant_id, "key": stored_key, "status": status,
                            "response": Jsonb({k: v for k, v in answer.items() if k not in not_replayed})})
        except BaseException:
            if refund is not None:
                refund(conn)
            raise
        if stored is not None:
            if refund is not None:
                refund(conn)
            return _replay(stored, digest, conn, still_there)
    resp = jsonify(answer)
    resp.status_code = status
    return resp


def idempotency_digest(idem: str, body, namespace: str = "") -> tuple[str, bytes]:
    """``(stored key, request hash)`` of an Idempotency-Key: the hash covers the method, the path and the
    canonical JSON of ``body``, so the same key with another request is told apart (409)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{request.method} {request.path}\n{canonical}".encode()).digest()
    # The column holds 200 characters: a namespaced key is stored as its digest.
    stored_key = f"{namespace}{hashlib.sha256(idem.encode()).hexdigest()}" if namespace else idem
    return stored_key, digest


def replayed(status: int, response: dict):
    """The stored answer to an Idempotency-Key, marked ``Idempotent-Replayed: true``."""
    resp = jsonify(response)
    resp.status_code = status
    resp.headers["Idempotent-Replayed"] = "true"
    return resp


def conflict() -> Problem:
    return Problem(409, "idempotency_conflict",
                   "This Idempotency-Key was used with another request; use a new key.", "Idempotency-Key")


def _replay(stored: dict, digest: bytes, conn=None, still_there=None):
    if bytes(stored["request_hash"]) != digest:
        raise conflict()
    if still_there is not None and 200 <= stored["status"] < 300 and not still_there(conn, stored["response"]):
        raise Problem(409, "idempotency_key_resource_gone",
                      "The resource this Idempotency-Key created was deleted since; use a new key to create "
                      "another.", "Idempotency-Key")
    return replayed(stored["status"], stored["response"])


def correlation_id(body: dict) -> str:
    return field(body, "correlation_id", str, required=False, max_length=200) or request_id()
