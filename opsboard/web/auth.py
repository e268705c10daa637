"""Login and logout."""
from __future__ import annotations

from urllib.parse import urlparse

from flask import Blueprint, flash, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user

from .. import audit
from ..auth import LoginThrottled, authenticate
from .context import get_config, get_db, request_id
from .security import client_address

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
    if request.method == "GET":
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
            error = f"Too many failed sign-ins. Try again in about {minutes} minute{'s' if minutes != 1 else ''}."
            response = render_template("auth/login.html", email=email, error=error, next=request.form.get("next", ""))
            return response, 429, {"Retry-After": str(exc.retry_after)}
        if principal is None:
            error, status = "Wrong email or password.", 401
        elif not principal.memberships:
            error, status = "This account has no active role in any tenant.", 403
        else:
            session.clear()  # a fresh session (and CSRF token) on privilege change
            login_user(principal)
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
    logout_user()
    session.clear()
    flash("Signed out.")
    return redirect(url_for("auth.login"))
