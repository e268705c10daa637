"""Request-wide security: CSRF, permission checks, tenant scope, request ids, headers."""
from __future__ import annotations

import functools
import hmac
import json
import re
import secrets
import uuid

from flask import current_app, g, request, session
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import RequestRedirect
from flask_babel import get_locale
from flask_babel import lazy_gettext as _l
from flask_login import current_user
from flask_babel import gettext as _

from .. import tenancy
from ..auth import TenantScope
from ..storable import problem, unstorable
from .errors import ApiError

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRFToken"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class CookieSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, at less cost for a request without a session (every API call).

    Flask builds the signing serializer again for every request, the cookie-less ones included, and
    reads seven cookie settings in ``save_session`` before finding the session empty: a visible share
    of an API request's Python (issue 27's profile).  The serializer is kept while the keys stay the same (it
    holds no state of a request), and an empty session that nothing modified only adds its ``Vary``.
    """

    _serializer: tuple | None = None

    def get_signing_serializer(self, app):
        keys = (app.secret_key, tuple(app.config.get("SECRET_KEY_FALLBACKS") or ()))
        cached = self._serializer
        if cached is None or cached[0] != keys:
            cached = self._serializer = (keys, super().get_signing_serializer(app))
        return cached[1]

    def open_session(self, app, request):
        if "HTTP_COOKIE" not in request.environ and app.secret_key:
            return self.session_class()  # no cookie at all: nothing to parse or verify
        return super().open_session(app, request)

    def save_session(self, app, session, response) -> None:
        if not session and not session.modified:
            if session.accessed:
                if "Vary" in response.headers:
                    response.vary.add("Cookie")
                else:
                    response.headers["Vary"] = "Cookie"  # what vary.add writes, without parsing a header set
            return
        super().save_session(app, session, response)


def csrf_token() -> str:
    """The session's CSRF token, created on first use."""
    token = session.get("_csrf")
    if not token:
        token = secrets.token_urlsafe(32)
        session["_csrf"] = token
    return token


def check_csrf() -> None:
    """Reject a state-changing request without the session's token (form field or header).

    Bearer-token API calls carry no cookie session, so they are not exposed to CSRF
    and are exempt.
    """
    if request.method in _SAFE_METHODS:
        return
    if request.path.startswith("/api/") and request.headers.get("Authorization", "").startswith("Bearer "):
        return
    if request.path.startswith("/api/") and current_app.config["SESSION_COOKIE_NAME"] not in request.cookies:
        return  # no session cookie, no ambient authority to forge: the API's own auth answers (401)
    expected = session.get("_csrf")
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    if not expected or not sent or not same_secret(str(expected), str(sent)):
        raise ApiError(400, "csrf_invalid", _("The form expired or did not come from this site; reload the page and try again."))


def same_secret(expected: str, sent: str) -> bool:
    """Constant-time comparison of two secrets, whatever characters ``sent`` holds.

    ``hmac.compare_digest`` raises TypeError on a str with non-ASCII
    characters: compared as UTF-8 bytes instead, a stray "é" is a mismatch,
    not a 500.
    """
    return hmac.compare_digest(expected.encode("utf-8", "surrogatepass"), sent.encode("utf-8", "surrogatepass"))


def takes_attachments(view):
    """Mark a view whose body may carry ticket attachments: it is read under a larger cap than the app's
    1 MiB ``MAX_CONTENT_LENGTH`` (see :func:`apply_body_limit`)."""
    view.body_limit = lambda config: config.ticket_attachment_max_bytes * 4 + 64 * 1024
    return view


def apply_body_limit() -> None:
    """The body cap of this request's view, set before anything reads the body.

    Registered first among the ``before_request`` hooks: :func:`refuse_unstorable` and the CSRF check read the
    form, and once read, a body over the app-wide cap has been refused with 413 whatever a blueprint's own
    hook would set later (a 1.4 MB PDF on a ticket reply, although tickets allow 2 MiB a file)."""
    view = current_app.view_functions.get(request.endpoint or "")
    limit = getattr(view, "body_limit", None)
    if limit is not None:
        from .context import get_config
        request.max_content_length = limit(get_config())


def refuse_unstorable() -> None:
    """400 ``invalid_input``, naming the field, for text PostgreSQL cannot store (a NUL character or
    a lone surrogate, :mod:`opsboard.storable`) anywhere a request brings text in: query and form
    arguments (names and values), multipart file names, a JSON body at any depth (keys and values),
    and the headers the product stores or echoes.  Checked once here, for every route: psycopg
    would otherwise refuse the value deep in a query, a 500.
    """
    # A JSON body has no form to parse, and the error (its translated message: the locale, the user, the
    # session) is built only to refuse: an API request pays for neither (issue 27's profile of a POST).
    environ = request.environ
    for header in _STORED_HEADERS:
        value = environ.get(header)
        if value and unstorable(value):
            raise _unstorable_refused(_HEADER_NAMES[header])
    body_json = request.method not in _SAFE_METHODS and request.is_json
    # No query string, no arguments to parse and look through (most API calls).
    for source in (request.args if environ.get("QUERY_STRING") else None,
                   request.form if request.method not in _SAFE_METHODS and not body_json else None):
        if source is None:
            continue
        for key, values in source.lists():
            # A multipart part can come without a name (key None): nothing to check there.
            if key and unstorable(key):
                raise _unstorable_refused(None)
            if any(v and unstorable(v) for v in values):
                raise _unstorable_refused(key)
    if request.method not in _SAFE_METHODS and not body_json and request.files:
        for key, upload in request.files.items(multi=True):
            if (key and unstorable(key)) or (upload.filename and unstorable(upload.filename)):
                raise _unstorable_refused(key)
    if body_json:
        raw = json_body_bytes()
        # Only an escape can bring such a character into JSON text (a raw NUL byte or an encoded
        # surrogate is not valid JSON or UTF-8, and fails the route's own parse): without ``\u`` (a C
        # search) or without a NUL or surrogate escape, nothing to parse here.
        if b"\\u" in raw and _JSON_UNSTORABLE.search(raw):
            try:
                body = json.loads(raw)
            except ValueError:
                return  # not JSON: the route's own parse answers 400
            where = problem(body)
            if where is not None:
                raise _unstorable_refused(where)


def json_body_bytes() -> bytes:
    """The request's body (cached for the view), or 413 when it is over the request's cap.

    A body with a ``Content-Length`` over the cap is refused by werkzeug before it is read; a chunked
    one is read up to the cap and silently cut there (``LimitedStream.readall``), which then failed
    the JSON parse as a 400.  A chunked body that fills the cap is taken for one that went over it."""
    raw = request.get_data(cache=True)
    cap = request.max_content_length
    if cap is not None and request.content_length is None and len(raw) >= cap:
        raise RequestEntityTooLarge()
    return raw


def _unstorable_refused(where: str | None) -> ApiError:
    return ApiError(400, "invalid_input",
                    _("The request holds a character that cannot be stored (a NUL or a lone surrogate); "
                      "remove it and try again."), field=where)


#: The request headers the product stores or echoes (in the environ's spelling) and their names.
_HEADER_NAMES = {"HTTP_IDEMPOTENCY_KEY": "Idempotency-Key", "HTTP_LAST_EVENT_ID": "Last-Event-ID",
                 "HTTP_X_REQUEST_ID": "X-Request-Id", "HTTP_USER_AGENT": "User-Agent"}
_STORED_HEADERS = tuple(_HEADER_NAMES)

#: In JSON text, an escape of a NUL (``\u0000``) or of a surrogate (``\ud800``-``\udfff``), not itself
#: escaped (an even run of backslashes before it).  A surrogate escape may be half of a valid pair, so a
#: match only says the body is worth parsing and looking through (:func:`opsboard.storable.problem`).
_JSON_UNSTORABLE = re.compile(rb"(?<!\\)(?:\\\\)*\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def before_request():
    """The app-wide checks of every request, in their order, as one hook (Flask looks each hook up
    and checks it for a coroutine on every request): the tenant scope, the request id, werkzeug's slash
    redirect made relative, the view's body cap, text PostgreSQL cannot store, CSRF."""
    g.tenancy_token = tenancy.enter(_signed_in_scope)
    assign_request_id()
    if request.routing_exception is not None and isinstance(request.routing_exception, RequestRedirect):
        return relative_redirect(request.routing_exception)
    apply_body_limit()
    refuse_unstorable()
    check_csrf()


def _signed_in_scope() -> str:
    """The row-level-security scope of a dashboard request (opsboard.tenancy), resolved at its first
    transaction: the signed-in user's tenants, every tenant for the operator's staff, none for a
    visitor.  An API request replaces it with its key's or token's tenant (:func:`scope_to`)."""
    from flask_login import current_user

    with tenancy.bypass(tenancy.Bypass.AUTHENTICATION):  # the session's user and memberships
        if not current_user.is_authenticated:
            return ""
        memberships = list(current_user.memberships)
    if any(m.is_operator for m in memberships):
        return tenancy.ALL
    return tenancy.value_for(m.tenant_id for m in memberships)


def rescope() -> None:
    """The signed-in user changed in this request (sign-in, sign-out): its next transaction takes the
    new user's scope."""
    tenancy.set_for_thread(_signed_in_scope)


def scope_to(tenant_ids) -> None:
    """The rest of this request runs in these tenants' scope (an API key's, a user token's)."""
    tenancy.set_for_thread(tenancy.value_for(tenant_ids))


def teardown_request(_exc=None) -> None:
    """Back to no scope after the request (a thread serves the next request with none)."""
    token = g.pop("tenancy_token", None)
    if token is not None:
        try:
            tenancy.leave(token)
        except ValueError:  # set in another context (never expected): leave nothing behind
            tenancy.set_for_thread("")


def relative_redirect(exc: RequestRedirect):
    """werkzeug's own redirect (``/jobs`` -> ``/jobs/``, 308) with a relative ``Location``.

    Redirects are relative, rather than production refusing to start without
    ``OPSBOARD_TRUSTED_HOSTS`` (issue 51): werkzeug builds this one from the request's ``Host``
    header (``Host: evil.example`` -> ``Location: http://evil.example/jobs/``), and it is the only
    absolute URL the product builds (views redirect to paths; nothing asks for ``_external``).  A
    relative one carries no host at all, in every mode and behind every proxy, and needs no setting
    that a missing variable would turn into a web app that does not start.  ``OPSBOARD_TRUSTED_HOSTS``
    stays as a further guard (any other Host answers 400)."""
    from urllib.parse import urlsplit
    from flask import redirect
    parts = urlsplit(exc.new_url)
    path = "/" + parts.path.lstrip("/")  # never "//host": a path of this app
    return redirect(path + (f"?{parts.query}" if parts.query else ""), exc.code)


def assign_request_id() -> None:
    # From the environ: a header lookup that misses builds a BadRequestKeyError (most requests send none).
    incoming = request.environ.get("HTTP_X_REQUEST_ID", "")
    # ASCII letters, digits and dashes only: the id is echoed in a header and
    # written to logs and audit rows.
    plain = incoming.replace("-", "")
    g.request_id = incoming if 0 < len(incoming) <= 64 and plain.isascii() and plain.isalnum() else uuid.uuid4().hex


def security_headers(response):
    """The security headers every answer carries, unless the view set its own.

    The app's fixed ones are built once (:func:`_fixed_headers`) and the answer's header names read
    once: seven ``setdefault`` calls, each a scan of the headers, and the policy's string built
    again per answer were a visible share of an API request's Python (issue 27's profile)."""
    fixed = current_app.extensions.get("opsboard_security_headers")
    if fixed is None:
        fixed = current_app.extensions["opsboard_security_headers"] = _fixed_headers()
    headers = response.headers
    present = {name.lower() for name, _ in headers.items()}
    missing = [] if "x-request-id" in present else [("X-Request-Id", getattr(g, "request_id", ""))]
    missing.extend((name, value) for low, name, value in fixed if low not in present)
    if "cache-control" not in present and not request.path.startswith("/static/"):
        # Pages hold tenant data: no copy in shared caches or on disk after sign-out.
        missing.append(("Cache-Control", "no-store"))
    if missing:
        headers.extend(missing)
    return response


def _fixed_headers() -> tuple[tuple[str, str, str], ...]:
    """``(lower-case name, name, value)`` of the headers that are the same on every answer of this app."""
    fixed = [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
             ("Referrer-Policy", "same-origin"),
             ("Content-Security-Policy",
              "default-src 'self'; img-src 'self' data:; style-src 'self'; "
              f"script-src 'self'; {_connect_src()}object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
              "form-action 'self'")]
    if current_app.config.get("SESSION_COOKIE_SECURE"):
        fixed.append(("Strict-Transport-Security", "max-age=31536000"))
    return tuple((name.lower(), name, value) for name, value in fixed)


def _connect_src() -> str:
    """The stream server's origin beside 'self' (the inbox page's EventSource follows a 307 there)."""
    config = current_app.extensions.get("opsboard_config")
    base = config.streams_url if config is not None else None
    if not base:
        return ""
    from urllib.parse import urlsplit
    parts = urlsplit(base)
    return f"connect-src 'self' {parts.scheme}://{parts.netloc}; "


#: Permissions of audited actions -> the action name their audit rows carry.
#: A refused attempt at one of them is recorded too, with outcome ``denied``.
AUDITED_ACTIONS = {"jobs.replay": "job.replay", "jobs.resolve": "job.resolve", "jobs.cancel": "job.cancel",
                   "jobs.pause": "pause",
                   "alerts.ack": "alert.ack", "templates.edit": "template.edit", "tickets.work": "ticket.work",
                   "users.manage": "user.manage"}
#: Route arguments that name an action's target.
_TARGET_ARGS = {"job_id": "job", "alert_id": "alert", "tenant_id": "tenant", "ticket_id": "ticket",
                "template_id": "template"}


def audit_denied(permission: str, tenant_id=None) -> None:
    """Record a refused state-changing attempt at an audited action (rate-limited, no payload).

    A failure to record never hides the 403: it is logged and the refusal stands.
    """
    action = AUDITED_ACTIONS.get(permission)
    if action is None or request.method in _SAFE_METHODS or not current_user.is_authenticated:
        return
    from .. import audit
    target_type = target_id = None
    for arg, kind in _TARGET_ARGS.items():
        if (request.view_args or {}).get(arg) is not None:
            target_type, target_id = kind, request.view_args[arg]
            break
    if tenant_id is None:
        # A tenant member's attempt belongs in that tenant's log too (operator staff: platform-wide).
        own = {m.tenant_id for m in current_user.memberships if not m.is_operator}
        if len(own) == 1 and not any(m.is_operator for m in current_user.memberships):
            tenant_id = next(iter(own))
    if target_type is None and request.endpoint:
        target_type = "endpoint"
        target_id = request.endpoint
    try:
        with current_app.extensions["opsboard_db"].connection() as conn:
            audit.record_denied(conn, audit.Actor.of(current_user, getattr(g, "request_id", None)), action,
                                target_type=target_type, target_id=target_id, tenant_id=tenant_id)
    except Exception:  # noqa: BLE001 - the refusal matters more than its record
        current_app.logger.exception("could not record a denied %s", action)


def requires(permission: str):
    """View decorator: signed in (else redirect to login) and holding ``permission`` (else 403).

    A refused POST to an audited action is recorded (:func:`audit_denied`).
    """

    def decorator(view):
        @functools.wraps(view)
        def wrapped(*args, **kwargs):
            if not current_user.is_authenticated:
                return current_app.login_manager.unauthorized()
            if not current_user.has(permission):
                audit_denied(permission)
                raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s.", permission=permission))
            return view(*args, **kwargs)

        wrapped.permission = permission
        return wrapped

    return decorator


def require_for_tenant(permission: str, tenant_id) -> None:
    """403 unless the current user holds ``permission`` for this tenant's row."""
    if not current_user.is_authenticated or not current_user.can(permission, tenant_id):
        audit_denied(permission, tenant_id)
        raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s for this tenant.", permission=permission))


def current_scope(permission: str = "dashboard.view") -> TenantScope:
    """The tenants the current user may see for ``permission``; every query takes it."""
    if not current_user.is_authenticated:
        return TenantScope(all=False)
    return current_user.scope(permission)


def client_address() -> str:
    return request.remote_addr or "unknown"


#: The main navigation: label, endpoint, permission, and whether the page is
#: for operator staff only (platform-wide, e.g. worker processes).
NAV = (  # labels translated when shown (lazy_gettext)
    (_l("Queues"), "queues.index", "jobs.view", False),
    (_l("Tenants"), "tenants.index", "tenants.view", False),
    (_l("Jobs"), "jobs.index", "jobs.view", False),
    (_l("Dead letters"), "deadletters.index", "jobs.view", False),
    (_l("Workers"), "workers.index", "workers.view", True),
    (_l("Deliveries"), "deliveries.index", "jobs.view", False),
    (_l("Webhooks"), "webhooks.index", "webhooks.manage", False),
    (_l("Notifications"), "notifications.index", "jobs.view", False),
    (_l("Inbox"), "inbox.index", "inbox.view", False),
    (_l("Alerts"), "alerts.index", "alerts.view", False),
    (_l("Reports"), "reports.index", "reports.view", False),
    (_l("Tickets"), "tickets.index", "tickets.view", False),
    (_l("Templates"), "templates.index", "templates.view", False),
    (_l("Audit"), "audit.index", "audit.view", False),
    (_l("API keys"), "apikeys.index", "users.manage", False),
)


def nav_links() -> list[tuple[str, str, str]]:
    """(label, endpoint, blueprint) of the pages the current user may open:
    the permission held, operator staff for platform pages, and the page built."""
    if not current_user.is_authenticated:
        return []
    links = []
    for label, endpoint, permission, staff_only in NAV:
        blueprint = endpoint.split(".")[0]
        if blueprint not in current_app.blueprints or not current_user.has(permission):
            continue
        if staff_only and not current_user.scope(permission).all:
            continue
        links.append((label, endpoint, blueprint))
    locale = str(get_locale() or "fa")
    for page in current_app.extensions["opsboard_catalogue"].pages.values():
        blueprint = page.endpoint.split(".")[0]
        if blueprint not in current_app.blueprints or not current_user.has(page.permission):
            continue
        if page.staff_only and not current_user.scope(page.permission).all:
            continue
        links.append((page.label(locale), page.endpoint, blueprint))
    return links
