"""The landing page after sign-in: queue health for ops, a welcome for others."""
from __future__ import annotations

from flask import Blueprint, current_app, redirect, render_template, url_for
from flask_login import current_user, login_required

bp = Blueprint("home", __name__)


@bp.route("/")
@login_required
def index():
    if current_user.has("jobs.view") and "queues" in current_app.blueprints:
        return redirect(url_for("queues.index"))
    if current_user.has("tickets.view") and "tickets" in current_app.blueprints:
        return redirect(url_for("tickets.index"))  # the support agent's landing page
    for permission, endpoint in (("templates.edit", "templates.index"), ("inbox.view", "inbox.index")):
        if current_user.has(permission) and endpoint.split(".")[0] in current_app.blueprints:
            return redirect(url_for(endpoint))
    return render_template("home/index.html")
