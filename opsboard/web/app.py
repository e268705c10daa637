"""The Flask app factory."""
from __future__ import annotations

import logging

import psycopg
from flask import Flask, current_app
from flask_login import LoginManager

from .. import db as dbmod
from .. import tenancy
from ..catalogue import activate
from ..config import Config, resource_dir
from ..features import build_catalogue
from ..auth import load_session_principal
from . import errors, security
from ..replica import UNKNOWN_LSN, ReadRouter
from .context import SESSION_COOKIE, SESSION_LIFETIME, SESSION_PROTECTION  # noqa: F401
from .context import WRITE_LSN, get_config, get_db, get_reads, request_id  # noqa: F401  (old `from .app import get_db` still resolves)

log = logging.getLogger(__name__)


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app.

    ``test_config`` may hold ``OPSBOARD`` (a :class:`Config`), ``DATABASE`` (an
    open :class:`~opsboard.db.Database` to share), ``CATALOGUE`` (a built
    :class:`~opsboard.catalogue.Catalogue`; default: built from the config) and
    any Flask settings.  The catalogue becomes the process's active one.
    """
    test_config = dict(test_config or {})
    config: Config = test_config.pop("OPSBOARD", None) or Config.from_env()
    database = test_config.pop("DATABASE", None)
    cat = test_config.pop("CATALOGUE", None) or build_catalogue(config)
    config.require_secret()

    app = Flask("opsboard", template_folder=str(resource_dir("templates")),
                static_folder=str(resource_dir("static")),
                static_url_path="/static")
    app.config.update(
        SECRET_KEY=config.secret_key,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=config.mode == "production",
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        REMEMBER_COOKIE_HTTPONLY=True,
        REMEMBER_COOKIE_SECURE=config.mode == "production",
        MAX_CONTENT_LENGTH=1 * 1024 * 1024,
    )
    if config.trusted_hosts:
        # Flask answers 400 to any other Host header: redirects and external
        # URLs are built from it, so a forged Host must never reach them.
        app.config["TRUSTED_HOSTS"] = list(config.trusted_hosts)
    elif config.mode == "production":
        log.warning("OPSBOARD_TRUSTED_HOSTS is not set: any Host header is accepted; "
                    "set it to the dashboard's host name(s)")
    app.config.update(test_config)
    app.extensions["opsboard_config"] = config
    app.session_interface = security.CookieSessions()
    from .. import tracing
    if tracing.setup("web"):  # OTEL_EXPORTER_OTLP_ENDPOINT set; each gunicorn worker builds its app after the fork
        # A span per request, the child of a valid incoming traceparent (a malformed one starts a new trace).
        # Not the streams (a span hours long), the probes and the static files.  Off: not even imported.
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor().instrument_app(app, tracer_provider=tracing.provider(),
                                           excluded_urls="/static/,/healthz,/readyz,/metrics,/stream$")

    if database is None:
        # Every web transaction bounded by the configured lock and statement timeouts (issue 51): a held
        # table lock or a slow plan answers 503 with Retry-After instead of holding every thread.
        database = dbmod.Database(dbmod.resolve_url(config), min_size=config.pool_min,
                                  max_size=config.pool_max, name="web", pooler=config.database_pooler,
                                  bounds=config.web_bounds()).open(check=False)
    app.extensions["opsboard_db"] = database
    reads = ReadRouter(database, config.read_database_url, max_lag=config.read_max_lag, pool_max=config.pool_max,
                       pooler=config.database_pooler)
    app.extensions["opsboard_reads"] = reads
    if reads.replica is not None:
        app.after_request(_remember_write)
    # Past any pooler: the SSE hub's LISTEN and the start-up's single connection.
    direct_url = app.extensions["opsboard_direct_url"] = config.direct_database_url or database.url

    app.extensions["opsboard_catalogue"] = cat
    activate(cat)
    _seed_shipped_templates(direct_url)
    _announce_route(database, direct_url, config.mode)

    login = LoginManager(app)
    login.login_view = "auth.login"
    login.session_protection = SESSION_PROTECTION
    from flask_babel import lazy_gettext

    login.login_message = lazy_gettext("Please sign in to continue.")

    @login.user_loader
    def _load_user(stored_id: str):
        # "<user id>:<session id>": a session ended server-side (sign out,
        # password change, deactivation) no longer loads, whatever the cookie says.
        with tenancy.bypass(tenancy.Bypass.AUTHENTICATION), get_db().connection() as conn:
            return load_session_principal(conn, stored_id)

    @login.unauthorized_handler
    def _unauthorized():
        """Browsers go to the sign-in page; JSON and htmx clients get a 401 with
        an error code (htmx then loads the sign-in page through HX-Redirect
        instead of swapping it into a table)."""
        from flask import flash, redirect, request
        from flask_login import login_url

        if errors.wants_json() or request.headers.get("HX-Request"):
            return errors.error_response(401, "unauthorized", str(lazy_gettext("Sign in to continue.")),
                                         {"HX-Redirect": login_url(login.login_view)})
        flash(login.login_message, category=login.login_message_category)
        return redirect(login_url(login.login_view, next_url=request.url))

    # The request id, the view's body cap (before anything reads the body), NUL characters, CSRF.
    app.before_request(security.before_request)
    app.teardown_request(security.teardown_request)
    app.after_request(security.security_headers)
    errors.register(app)
    from . import i18n
    i18n.init_app(app)

    @app.route("/favicon.ico")
    def favicon():
        """Browsers ask for it on every page: a small icon (static/favicon.ico), cached for a day."""
        return app.send_static_file("favicon.ico"), 200, {"Cache-Control": "public, max-age=86400"}

    from ..redact import redact_identifier
    app.add_template_filter(redact_identifier, "redact_id")

    @app.context_processor
    def _globals():
        return {"csrf_token": security.csrf_token, "config_mode": config.mode,
                "blueprints": app.blueprints, "audit_target_url": audit_target_url,
                "nav_links": security.nav_links}

    from . import (alerts, api, apikeys, audit, auth, deadletters, deliveries, health, home, jobs, metrics,
                   queues, reports, tenants, tickets, webhooks, workers)
    from . import inbox, notifications, pauses, provider_reports, templates
    for module in (auth, health, home, audit, queues, tenants, metrics, jobs, deadletters, workers, alerts,
                   apikeys, api, deliveries, reports, tickets, webhooks, templates, inbox,
                   notifications, pauses, provider_reports):
        app.register_blueprint(module.bp)
    _register_pages(app, cat)
    return app


def _register_pages(app: Flask, cat) -> None:
    """The catalogue's dashboard pages (features' and extensions'), after the product's own."""
    import importlib

    from ..config import ConfigError
    for page in cat.pages.values():
        module, _, attr = page.blueprint.partition(":")
        try:
            bp = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"page {page.name}: blueprint {page.blueprint!r} cannot be imported "
                              f"({type(exc).__name__}: {exc})") from None
        app.register_blueprint(bp)


def _remember_write(response):
    """After a signed-in user's action, keep the primary's WAL position in the session: that
    user's heavy reads go to the primary until the replica has replayed it (opsboard.replica)."""
    from flask import request, session
    from flask_login import current_user

    if request.method in ("GET", "HEAD", "OPTIONS") or response.status_code >= 400 \
            or not current_user.is_authenticated:
        return response
    try:
        session[WRITE_LSN] = get_reads().primary_lsn()
    except psycopg.Error:
        session[WRITE_LSN] = UNKNOWN_LSN  # unknown: read the primary until the next write says more
    return response


#: Where an audit record's target can be looked at: target_type -> (endpoint, argument).
AUDIT_TARGETS = {"job": ("jobs.detail", "job_id"), "alert": ("alerts.detail", "alert_id"),
                 "tenant": ("tenants.detail", "tenant_id"), "report": ("reports.detail", "run_id"),
                 "ticket": ("tickets.detail", "ticket_id")}


def _announce_route(database, direct_url: str, mode: str = "production") -> None:
    """Say at start-up when the pooled connections lose the session settings (one warning line;
    see :func:`opsboard.db.announce_route`), and refuse, in production, a role that row-level
    security does not hold (:func:`opsboard.db.check_app_role`).  A database not reachable yet is not checked."""
    import psycopg

    try:
        with database.pool.connection(timeout=5) as conn:
            dbmod.announce_route(conn, database.pooler, direct_url, "web")
            dbmod.check_app_role(conn, mode, "the web app")
    except psycopg.Error:
        pass


def _seed_shipped_templates(url: str) -> None:
    """Write the catalogue's notification channels (``notification_channels``), then publish the
    shipped templates missing from the database (one cheap query each when nothing is); a web
    process that cannot reach the database yet starts anyway (``opsboard migrate`` and the worker seed too)."""
    import psycopg

    from .. import channels
    from ..notifications.templates import seed_shipped
    try:
        with tenancy.bypass(tenancy.Bypass.SETUP), dbmod.connect(url) as conn:
            channels.sync(conn)  # the catalogue's channels first: the templates' channel key needs them
            seeded = seed_shipped(conn)
    except (dbmod.DatabaseUnavailable, psycopg.Error) as exc:
        log.warning("shipped templates not checked: %s", str(exc).strip().splitlines()[0] if str(exc) else exc)
        return
    if seeded:
        log.info("%d shipped template(s) published", len(seeded))


def audit_target_url(record: dict) -> str | None:
    """A link to an audit record's target, when the dashboard has a page for it."""
    from flask import url_for

    target = AUDIT_TARGETS.get(record.get("target_type") or "")
    if not target or target[0].split(".")[0] not in current_app.blueprints or not record.get("target_id"):
        return None
    return url_for(target[0], **{target[1]: record["target_id"]})

