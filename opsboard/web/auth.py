"""Login and logout."""
from __future__ import annotations

from urllib.parse import urlparse

from flask import Blueprint, current_app, flash, redirect, render_template, request, session, url_for
from flask_babel import gettext as _
from flask_babel import ngettext
from flask_login import current_user, login_required, login_user, logout_user

from .. import audit
from ..auth import (AuthError, LoginThrottled, authenticate, end_all_sessions, end_session, session_count,
                    set_password, start_session)
from .context import bind_session_to_client, get_config, get_db, request_id
from .i18n import digits
from .security import client_address, rescope

bp = Blueprint("auth", __name__)


def _safe_next(target: str | None) -> str:
    """``target`` when it is a path on this site, else the home page.

    Browsers read ``/\\evil.example`` as ``//evil.example`` and drop tabs and
    newlines inside URLs, so backslashes and control characters are refused
    outright rather than trusting how they are later quoted.
    """
    if target and not any(c == "\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        parts = urlparse(target)
        if not parts.scheme and not parts.netloc and target.startswith("/") and not target.startswith("//"):
            return target
    return url_for("home.index")


@bp.route("/login", methods=["GET", "POST"])
def login():
    # Only POST signs in: HEAD (added by Flask to every GET route) is a safe
    # method the CSRF guard lets through, so it must never act on a body.
    if request.method != "POST":
        if current_user.is_authenticated:
            return redirect(_safe_next(request.args.get("next")))
        return render_template("auth/login.html", email="", next=request.args.get("next", ""))

    cfg = get_config()
    email = request.form.get("email", "").strip()
    password = request.form.get("password", "")
    status, error = 200, None
    with get_db().connection() as conn:
        try:
            principal = authenticate(conn, email, password, client_address(),
                                     max_account=cfg.login_max_failures_account,
                                     max_address=cfg.login_max_failures_address,
                                     window_seconds=cfg.login_window_seconds)
        except LoginThrottled as exc:
            minutes = max(1, round(exc.retry_after / 60))
            error = ngettext("Too many failed sign-ins. Try again in about %(n)s minute.",
                             "Too many failed sign-ins. Try again in about %(n)s minutes.", minutes,
                             n=digits(minutes))
            response = render_template("auth/login.html", email=email, error=error, next=request.form.get("next", ""))
            return response, 429, {"Retry-After": str(exc.retry_after)}
        if principal is None:
            error, status = _("Wrong email or password."), 401
        elif not principal.memberships:
            error, status = _("This account has no active role in any tenant."), 403
        else:
            session.clear()  # a fresh session (and CSRF token) on privilege change
            start_session(conn, principal, int(current_app.permanent_session_lifetime.total_seconds()))
            login_user(principal)
            rescope()  # the audit record below is written in the signed-in user's scope
            bind_session_to_client()  # the stream server checks it (opsboard.web.streams)
            audit.record(conn, audit.Actor(principal.email, principal.id, request_id()), "auth.login",
                         target_type="user", target_id=principal.id)
            return redirect(_safe_next(request.form.get("next")))
    return render_template("auth/login.html", email=email, error=error, next=request.form.get("next", "")), status


@bp.route("/logout", methods=["POST"])
def logout():
    if current_user.is_authenticated:
        with get_db().connection() as conn:
            audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()), "auth.logout",
                         target_type="user", target_id=current_user.id)
            end_session(conn, current_user.session_id)  # a copied cookie dies with this one
    logout_user()
    session.clear()
    flash(_("Signed out."))
    return redirect(url_for("auth.login"))


def _home_tenant_id():
    memberships = getattr(current_user, "memberships", None) or []
    return memberships[0].tenant_id if memberships else None


def _account_page(conn, status: int = 200, **extra):
    from ..notifications import preferences
    sessions = session_count(conn, current_user.id)
    notification = preferences.notification_locale(conn, current_user.id, _home_tenant_id())
    return render_template("auth/account.html", sessions=sessions, notification=notification, **extra), status


@bp.route("/account")
@login_required
def account():
    """The user's own page: who they are, their roles, their sessions, their notifications' language."""
    with get_db().connection() as conn:
        return _account_page(conn)


@bp.route("/account/notification-language", methods=["POST"])
@login_required
def save_notification_locale():
    """The language of the person's notifications (issue 43): fa, en, or "" to follow the dashboard's
    language (then the tenant's default, then fa).  Audited ``user.notification_locale``; an unknown
    language is a 400 ``bad_locale``, nothing saved."""
    from ..errors import OpsError
    from ..notifications import preferences
    locale = request.form.get("notification_locale", "") or None
    with get_db().connection() as conn:
        try:
            with conn.transaction():
                before = preferences.notification_locale(conn, current_user.id, _home_tenant_id())["locale"]
                preferences.set_locale(conn, current_user.id, locale)
                audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()),
                             "user.notification_locale", target_type="user", target_id=current_user.id,
                             before={"locale": before}, after={"locale": locale})
        except OpsError:
            return _account_page(conn, 400, notification_error=_("Unknown language."))
    flash(_("Notification language saved."))
    return redirect(url_for("auth.account") + "#notification-language"), 303


@bp.route("/account/password", methods=["POST"])
@login_required
def change_password():
    """Change one's own password: the current one is checked (and throttled as a
    sign-in is), every other session ends, this browser stays signed in."""
    cfg = get_config()
    current = request.form.get("current_password", "")
    new, again = request.form.get("new_password", ""), request.form.get("new_password_again", "")
    error, status = None, 400
    if new != again:
        error = _("The two new passwords differ.")
    elif len(new) < 8:
        error = _("The new password must have at least 8 characters.")
    elif new == current:
        error = _("The new password must differ from the current one.")
    with get_db().connection() as conn:
        if error is None:
            try:
                checked = authenticate(conn, current_user.email, current, client_address(),
                                       max_account=cfg.login_max_failures_account,
                                       max_address=cfg.login_max_failures_address,
                                       window_seconds=cfg.login_window_seconds)
            except LoginThrottled as exc:
                minutes = max(1, round(exc.retry_after / 60))
                error, status = ngettext("Too many failed sign-ins. Try again in about %(n)s minute.",
                                         "Too many failed sign-ins. Try again in about %(n)s minutes.", minutes,
                                         n=digits(minutes)), 429
            else:
                if checked is None or checked.id != current_user.id:
                    error, status = _("The current password is wrong."), 403
        if error is None:
            try:
                with conn.transaction():
                    set_password(conn, current_user.id, new)  # ends every session, this one too
                    audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()),
                                 "auth.password_change", target_type="user", target_id=current_user.id)
            except AuthError:
                error = _("The new password must have at least 8 characters.")
            else:
                session.clear()
                principal = start_session(conn, current_user._get_current_object(),
                                          int(current_app.permanent_session_lifetime.total_seconds()))
                login_user(principal)
                bind_session_to_client()
                flash(_("Password changed. Every other session has been signed out."))
                return redirect(url_for("auth.account"))
        return _account_page(conn, status, password_error=error)


@bp.route("/account/sign-out-everywhere", methods=["POST"])
@login_required
def sign_out_everywhere():
    """End every session of the current user, on every browser."""
    with get_db().connection() as conn:
        with conn.transaction():
            ended = end_all_sessions(conn, current_user.id)
            audit.record(conn, audit.Actor(current_user.email, current_user.id, request_id()),
                         "auth.logout_everywhere", target_type="user", target_id=current_user.id,
                         after={"sessions_ended": ended})
    logout_user()
    session.clear()
    flash(ngettext("Signed out everywhere (%(n)s session ended).", "Signed out everywhere (%(n)s sessions ended).",
                   ended, n=digits(ended)))
    return redirect(url_for("auth.login"))
