"""Template authoring (role ``template_author``): list, draft, edit with a live
preview (htmx, debounced) of every channel in the edited locale beside the
``fa`` fallback, diff against the live version, publish and roll back
(audited), and which version each delivery used.  Templates are platform-wide."""
from __future__ import annotations

import json
import threading

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l

from ..channels import channel_names
from ..errors import OpsError
from ..notifications import render, render_sandbox, templates, tracking
from ..notifications.policy import policies
from . import forms
from .context import get_db
from .errors import ApiError, human_message
from .security import current_scope, requires

bp = Blueprint("templates", __name__, url_prefix="/templates")
bp.context_processor(forms.form_globals)


def _sample(raw: str | None) -> dict:
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise ApiError(400, "invalid_sample", _("The sample payload must be JSON.")) from None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_sample", _("The sample payload must be a JSON object."))
    return value


#: Refusals of the bounded sandbox (opsboard.notifications.render), shown in the editor in the reader's language.
_LIMIT_MESSAGES = {
    "too_many_steps": _l("The template does too much work (loops, calls or recursion); simplify it."),
    "too_large": _l("The template makes a number, text or list that is too large; simplify it."),
    "unsupported_tag": _l("include, import, extends and from are not available in notification templates."),
    "render_error": _l("The template failed while rendering with the sample payload."),
    "too_slow": _l("The preview took too long and was stopped; simplify the template."),
    "busy": _l("The preview is busy; try again in a moment."),
}
_sandbox_lock = threading.Lock()


def _sandbox() -> render_sandbox.RenderSandbox:
    """The process's preview renderer, started on first use (after gunicorn forked)."""
    with _sandbox_lock:
        box = current_app.extensions.get("opsboard_render_sandbox")
        if box is None:
            box = current_app.extensions["opsboard_render_sandbox"] = render_sandbox.RenderSandbox()
        return box


def _render_cells(specs: list[dict]) -> list[render.Rendered]:
    """Every cell's preview, rendered in the sandbox processes under one deadline; a refusal of the
    bounds becomes a translated message in the editor, never a 500."""
    try:
        outs = _sandbox().preview_many(specs) if specs else []
    except render_sandbox.RenderUnavailable as exc:
        outs = [render.Rendered("", "", s["locale"], s["locale"] in render.RTL_LOCALES, error=str(exc),
                                error_code=exc.code) for s in specs]
    for out in outs:
        if out.error_code in _LIMIT_MESSAGES:
            out.error = str(_LIMIT_MESSAGES[out.error_code])
    return outs


def _key_arg(key: str) -> str:
    try:
        templates._check_ids(key, "inbox", "fa")
    except OpsError:
        raise ApiError(404, "not_found", _("No such template key.")) from None
    return key


@bp.route("/")
@requires("templates.view")
def index():
    with get_db().connection() as conn:
        keys = templates.keys(conn)
    declared = {p.template: p for p in policies()}
    missing = sorted(k for k in declared if k not in {r["key"] for r in keys})
    return render_template("templates/index.html", keys=keys, missing=missing, channels=channel_names())


@bp.route("/<key>")
@requires("templates.view")
def detail(key):
    key = _key_arg(key)
    with get_db().connection() as conn:
        versions = templates.versions(conn, key)
        live = templates.live(conn, key)
        usage = templates.usage(conn, key)
        recent = tracking.recent(conn, current_scope("templates.view"), template_key=key, limit=50)
    groups: dict = {}
    for v in versions:
        groups.setdefault((v["channel"], v["locale"]), []).append(v)
    return render_template("templates/detail.html", key=key, groups=groups, live=live, usage=usage,
                           recent=recent, channels=channel_names())


@bp.route("/<key>/edit")
@requires("templates.edit")
def edit(key):
    key = _key_arg(key)
    channel = request.args.get("channel", "inbox")
    locale = request.args.get("locale", "fa")
    if channel not in channel_names() or not (len(locale) == 2 and locale.isalpha() and locale.islower()):
        raise ApiError(400, "invalid_filter", _("Choose a channel and a two-letter locale."))
    with get_db().connection() as conn:
        draft = templates.versions(conn, key)
        live = templates.live(conn, key)
    current = next((v for v in draft if v["channel"] == channel and v["locale"] == locale and v["status"] == "draft"),
                   None) or live.get((channel, locale)) or live.get((channel, "fa"))
    form = {"subject": current["subject"] if current else "", "body": current["body"] if current else "",
            "variables": ", ".join(current["variables"]) if current else "",
            "sample": json.dumps(current["sample"] if current else {}, ensure_ascii=False, indent=1)}
    ctx = _preview_context(key, channel, locale, form)
    return render_template("templates/edit.html", key=key, channel=channel, locale=locale, form=form,
                           draft=current if current and current["status"] == "draft" else None, **ctx)


def _preview_context(key: str, channel: str, locale: str, form: dict) -> dict:
    """Every channel of the key rendered in ``locale`` and in ``fa``, the edited one from the form."""
    sample = _sample(form.get("sample"))
    try:
        declared = templates.parse_variables(form.get("variables", ""))
    except OpsError as exc:
        declared, var_error = [], human_message(exc)
    else:
        var_error = None
    with get_db().connection() as conn:
        versions = templates.versions(conn, key)
        live = templates.live(conn, key)
    drafts = {(v["channel"], v["locale"]): v for v in versions if v["status"] == "draft"}
    locales = [locale] if locale == render.FALLBACK_LOCALE else [locale, render.FALLBACK_LOCALE]
    rows, specs = [], []
    for ch in channel_names():
        cells = []
        for loc in locales:
            if (ch, loc) == (channel, locale):
                src = {"subject": form.get("subject", ""), "body": form.get("body", ""), "variables": declared,
                       "origin": None, "sample": sample}
            elif loc != locale:
                # The fallback column shows what would be sent in that locale: its published version,
                # never a draft (a broken draft is not what a recipient would get).
                t = live.get((ch, loc))
                src = t and {"subject": t["subject"], "body": t["body"], "variables": t["variables"],
                             "origin": t, "sample": {**(t["sample"] or {}), **sample}}
            else:
                t = drafts.get((ch, loc)) or live.get((ch, loc))
                # Its own sample, overridden by the author's: the same payload fills every cell.
                src = t and {"subject": t["subject"], "body": t["body"], "variables": t["variables"],
                             "origin": t, "sample": {**(t["sample"] or {}), **sample}}
            if src is None:
                cells.append({"locale": loc, "absent": True,
                              "fallback": render.pick_locale({l for (c, l) in live if c == ch},
                                                             render.locale_chain(loc, None))})
                continue
            specs.append({"channel": ch, "locale": loc, "subject": src["subject"], "body": src["body"],
                          "declared": src["variables"], "sample": src["sample"]})
            cells.append({"locale": loc, "absent": False, "origin": src["origin"], "out": None,
                          "declared": src["variables"]})
        if any(not c["absent"] for c in cells) or ch == channel:
            rows.append({"channel": ch, "cells": cells})
    outs = iter(_render_cells(specs))
    for row in rows:
        for c in row["cells"]:
            if not c["absent"]:
                c["out"] = next(outs)
    edited_live = live.get((channel, locale))
    new = {"version": "draft", "subject": form.get("subject", ""), "body": form.get("body", ""),
           "variables": declared}
    return {"rows": rows, "locales": locales, "declared": declared, "var_error": var_error,
            "diff": templates.diff(edited_live, new), "live_version": edited_live["version"] if edited_live else None}


@bp.route("/<key>/_preview", methods=["POST"])
@requires("templates.view")
def preview(key):
    key = _key_arg(key)
    channel = request.form.get("channel", "inbox")
    locale = request.form.get("locale", "fa")
    if channel not in channel_names():
        raise ApiError(400, "invalid_channel", _("Unknown channel."))
    form = {k: request.form.get(k, "") for k in ("subject", "body", "variables", "sample")}
    try:
        ctx = _preview_context(key, channel, locale, form)
    except ApiError as exc:
        return render_template("_error.html", status=exc.status, code=exc.code, message=exc.message), 200
    return render_template("templates/_preview.html", key=key, channel=channel, locale=locale, **ctx)


@bp.route("/", methods=["POST"])
@requires("templates.edit")
def create():
    key = (request.form.get("key") or "").strip()
    try:
        templates._check_ids(key, "inbox", "fa")
    except OpsError as exc:
        raise ApiError(400, exc.code, human_message(exc)) from None
    return redirect(url_for("templates.edit", key=key, channel=request.form.get("channel", "inbox"), locale="fa"), 303)


@bp.route("/<key>/draft", methods=["POST"])
@requires("templates.edit")
def save(key):
    key = _key_arg(key)
    channel, locale = request.form.get("channel", ""), request.form.get("locale", "")
    with get_db().connection() as conn:
        row = templates.save_draft(conn, forms.actor(), key, channel, locale,
                                   subject=request.form.get("subject", ""), body=request.form.get("body", ""),
                                   variables=request.form.get("variables", ""),
                                   sample=_sample(request.form.get("sample")))
    return redirect(url_for("templates.edit", key=key, channel=row["channel"], locale=row["locale"], saved=1), 303)


@bp.route("/<key>/publish/<uuid:template_id>", methods=["POST"])
@requires("templates.edit")
def publish(key, template_id):
    """Publish a draft.  From htmx (the editor, the versions page) a refusal (a broken draft: 422) goes
    into the form's result slot, where the author is; success goes to the versions page."""
    with get_db().connection() as conn:
        row = templates.publish(conn, template_id, forms.actor(), forms.reason(), forms.request_key())
    target = url_for("templates.detail", key=row["key"], published=row["version"])
    if request.headers.get("HX-Request"):
        response = current_app.response_class("", status=200)
        response.headers["HX-Redirect"] = target
        return response
    return redirect(target, 303)


@bp.route("/<key>/rollback/<uuid:template_id>", methods=["POST"])
@requires("templates.edit")
def rollback(key, template_id):
    with get_db().connection() as conn:
        row = templates.rollback(conn, template_id, forms.actor(), forms.reason(), forms.request_key())
    return redirect(url_for("templates.detail", key=row["key"], published=row["version"]), 303)
