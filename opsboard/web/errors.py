"""Errors as clear 4xx answers: JSON with an error code for API and htmx clients,
an HTML page for browsers; never a traceback."""
from __future__ import annotations

import logging

import psycopg
from flask import jsonify, render_template, request
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l
from werkzeug.exceptions import HTTPException, MethodNotAllowed, SecurityError

from .. import db
from ..errors import OpsError

log = logging.getLogger(__name__)

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "too_large", 429: "too_many_requests",
          500: "internal_error", 503: "unavailable"}


#: Seconds a client waits before retrying a request refused while the database or the disk is away.
UNAVAILABLE_RETRY_AFTER = 5


class ApiError(Exception):
    """Raised by views: becomes ``status`` with ``{"error": code, "message": ...}`` (and ``"field"``
    naming the input refused, when one is known)."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
        self.field = field


#: Parameters of core refusals that hold workflow words (statuses, actions, roles), shown translated;
#: a list of names only where it lists actions (elsewhere it lists the values to type: codes, kept).
_WORD_PARAMS = frozenset({"action", "status", "role", "resolution"})


def human_message(exc: OpsError) -> str:
    """A refusal of the core in the reader's language: its message id (``exc.template``, extracted from
    ``OpsError(...)`` calls into the catalog) translated, then its values filled in.  The API keeps the
    English ``str(exc)`` beside its stable code."""
    from .i18n import prefs, word_label

    if request.path.startswith("/api/") or prefs()[0] == "en":   # English is the source language
        return str(exc)

    words = _WORD_PARAMS | ({"names"} if exc.code == "invalid_transition" else set())
    comma = "، " if prefs()[0] == "fa" else ", "
    params = {k: comma.join(word_label(w) for w in v.split(", ")) if k in words and isinstance(v, str) else v
              for k, v in exc.params.items()}
    return _(exc.template, **params)


def wants_json() -> bool:
    if request.path.startswith("/api/"):
        return True
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json" and request.accept_mimetypes[best] > request.accept_mimetypes["text/html"]


def error_response(status: int, code: str, message: str, headers: dict | None = None, field: str | None = None):
    if wants_json():
        response = jsonify(error=code, message=message, **({"field": field} if field else {}))
    else:
        template = "_error.html" if request.headers.get("HX-Request") else "error.html"
        response = render_template(template, status=status, code=code, message=message), status
        from flask import make_response
        response = make_response(response)
    response.status_code = status
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def _http_message(status: int) -> str:
    messages = {400: _l("The request could not be understood."), 401: _l("Sign in to continue."),
                403: _l("You may not do this."), 404: _l("This page does not exist."),
                405: _l("This address does not accept this kind of request."), 413: _l("The request is too large."),
                429: _l("Too many requests; try again later.")}
    return str(messages.get(status, _l("The request could not be completed.")))


def _allowed_methods() -> set[str]:
    """The methods the url_map routes for this request's path (a 405 raised without them)."""
    from flask import current_app
    adapter = current_app.url_map.bind_to_environ(request.environ)
    try:
        return set(adapter.allowed_methods())
    except HTTPException:
        return set()


def register(app) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers, exc.field)

    @app.errorhandler(OpsError)
    def _core_error(exc: OpsError):
        # The one place a refusal of the core becomes an HTTP answer: its
        # stable code, and the status the code maps to (opsboard.errors).
        return error_response(exc.status, exc.code, human_message(exc))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if isinstance(exc, SecurityError):
            # A Host outside OPSBOARD_TRUSTED_HOSTS: no page (it would build
            # links from that very host), a plain answer.
            from flask import make_response
            response = make_response("400 untrusted_host: this host name is not served here.\n", 400)
            response.mimetype = "text/plain"
            return response
        status = exc.code or 500
        message = exc.description or ""
        if message == type(exc).description:   # werkzeug's own English text (an unknown URL, a wrong method...)
            message = _http_message(status)
        headers = None
        if isinstance(exc, MethodNotAllowed):
            # RFC 9110: a 405 names the methods the resource takes.  werkzeug found them in the url_map
            # for this path (valid_methods); HEAD and OPTIONS, answered for every rule, included.
            headers = {"Allow": ", ".join(sorted(exc.valid_methods or _allowed_methods()))}
        return error_response(status, _CODES.get(status, "http_error"), message, headers)

    @app.errorhandler(psycopg.Error)
    @app.errorhandler(OSError)
    def _unavailable(exc: Exception):
        # The one place a database that says no becomes an answer, for the pages and the API alike.
        # It went away (a restart, the pool could not connect), is read-only (a failover to a standby),
        # shutting down, or gave up on a lock or a statement (the web's timeouts), a serialization
        # failure or a deadlock (:func:`opsboard.db.unavailable`); or the disk refused a file (storage
        # unwritable, full): nothing is wrong with the request, so not a 500 and no traceback, but a
        # 503 the client retries after a moment (with its Idempotency-Key): a serialization failure
        # or a deadlock is not retried inside the request (the client's retry is that retry, and a
        # request's time stays bounded by the web's timeouts).  Any other database error is a bug:
        # a 500, logged with its traceback.
        from flask import g
        if isinstance(exc, psycopg.Error) and not db.unavailable(exc):
            return _unexpected(exc)
        log.warning("unavailable on %s %s: %s%s", request.method, request.path, type(exc).__name__,
                    f" (SQLSTATE {exc.sqlstate})" if getattr(exc, "sqlstate", None) else "",
                    extra={"request_id": getattr(g, "request_id", None)})
        return error_response(503, "unavailable", _("The service is briefly unavailable; try again in a moment."),
                              {"Retry-After": str(UNAVAILABLE_RETRY_AFTER)})

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        from flask import g
        log.exception("unhandled error on %s %s", request.method, request.path,
                      extra={"request_id": getattr(g, "request_id", None)})
        return error_response(500, "internal_error", _("Something went wrong; the error was logged."))
