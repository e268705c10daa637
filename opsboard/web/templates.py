"""Template authoring (role ``template_author``): list, draft, edit with a live
preview (htmx, debounced) of every channel in the edited locale beside the
``fa`` fallback, diff against the live version, publish and roll back
(audited), and which version each delivery used.

Every page works in one scope (``?tenant=SLUG``): a tenant's own versions, or the platform's (no
``tenant``: the default of the operator's authors).  A tenant's author sees the tenant's versions and
the platform's published ones it inherits, read-only; only the operator's authors (an operator-tenant
membership: ``current_scope(...).all``) write the platform's.  Writes are checked in the version's
own tenant here (a refusal is audited) and again by the core (:mod:`opsboard.notifications.templates`).
"""
from __future__ import annotations

import json
import threading

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from flask_login import current_user
from flask_babel import gettext as _
from flask_babel import lazy_gettext as _l

from .. import db
from ..auth import ROLE_PERMISSIONS, TenantScope
from ..channels import channel_names
from ..errors import OpsError
from ..notifications import render, render_sandbox, templates, tracking
from ..notifications.policy import policies
from . import forms
from .context import get_db
from .errors import ApiError, human_message
from .security import audit_denied, current_scope, require_for_tenant, requires

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


def _scope() -> dict:
    """The scope the page works in, from ``tenant`` (a slug, in the query or the form).

    ``tenant_id`` None is the platform's: the default for the operator's authors; anyone else works in
    their own tenant.  A slug names one of the user's own tenants that grants ``templates.view`` (any
    tenant for the operator's authors); another is a 403 (audited when it was a write), whether or not
    it exists.  ``can_edit``: the user may
    write this scope's versions; ``choices``: the scopes the user may switch to.
    """
    view = current_scope("templates.view")
    slug = (request.values.get("tenant") or "").strip() or None
    own = sorted({(m.tenant_slug, m.tenant_name, m.tenant_id) for m in current_user.memberships
                  if not m.is_operator and "templates.view" in ROLE_PERMISSIONS[m.role]})
    choices = [(t_slug, name) for t_slug, name, _tid in own]
    if view.all:
        # The operator's authors may look at any tenant's versions (and write them: they hold the
        # permission in every tenant); the platform's are theirs alone.
        with get_db().connection() as conn:
            choices = [(t["slug"], t["name"]) for t in db.all_rows(conn, "tenant_list_visible", view.params)
                       if not t["is_operator"]]
    if slug is None and view.all:
        return {"tenant_id": None, "slug": None, "name": None, "choices": choices, "platform": True,
                "can_edit": current_scope("templates.edit").all, "operator": True}
    if slug is None:
        if not own:
            raise ApiError(404, "not_found", _("No such tenant."))
        slug = own[0][0]
    tenant = next(({"id": tid, "slug": t_slug, "name": name} for t_slug, name, tid in own if t_slug == slug), None)
    if tenant is None and not view.all:
        # Another tenant's scope (or no tenant at all: the answer is the same, so it says nothing of which
        # slugs exist), read or written: refused and, for a write, audited.
        audit_denied("templates.edit")
        raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s for this tenant.",
                                           permission="templates.view"))
    if tenant is None:
        with get_db().connection() as conn:
            tenant = db.one(conn, "tenant_get_by_slug", {"slug": slug})
        if tenant is None:
            raise ApiError(404, "not_found", _("No such tenant."))
    return {"tenant_id": tenant["id"], "slug": tenant["slug"], "name": tenant["name"], "choices": choices,
            "platform": False, "can_edit": current_user.can("templates.edit", tenant["id"]), "operator": view.all}


def _require_edit(tenant_id) -> TenantScope:
    """403 (audited) unless the user may write versions of ``tenant_id`` (None: the platform's, for the
    operator's authors only); returns the user's ``templates.edit`` scope for the core's own check."""
    scope = current_scope("templates.edit")
    if tenant_id is None:
        if not scope.all:
            audit_denied("templates.edit")
            raise ApiError(403, "forbidden", _("Only the operator's template authors may change the platform's "
                                               "templates."))
    else:
        require_for_tenant("templates.edit", tenant_id)
    return scope


@bp.route("/")
@requires("templates.view")
def index():
    scope = _scope()
    with get_db().connection() as conn:
        keys = templates.keys(conn, scope["tenant_id"])
    declared = {p.template: p for p in policies()}
    missing = sorted(k for k in declared if k not in {r["key"] for r in keys})
    return render_template("templates/index.html", keys=keys, missing=missing, channels=channel_names(),
                           scope=scope)


@bp.route("/<key>")
@requires("templates.view")
def detail(key):
    key = _key_arg(key)
    scope = _scope()
    tid = scope["tenant_id"]
    with get_db().connection() as conn:
        versions = templates.versions(conn, key, tid)
        live = templates.live(conn, key, tid)
        inherited = templates.live(conn, key) if tid is not None else {}
        usage = templates.usage(conn, key, tid)
        seen = current_scope("templates.view") if tid is None else TenantScope(all=False, ids=(tid,))
        recent = tracking.recent(conn, seen, template_key=key, limit=50)
    groups: dict = {}
    for v in versions:
        groups.setdefault((v["channel"], v["locale"]), []).append(v)
    return render_template("templates/detail.html", key=key, groups=groups, live=live, usage=usage,
                           recent=recent, channels=channel_names(), scope=scope, inherited=inherited)


@bp.route("/<key>/edit")
@requires("templates.edit")
def edit(key):
    key = _key_arg(key)
    scope = _scope()
    _require_edit(scope["tenant_id"])
    channel = request.args.get("channel", "inbox")
    locale = request.args.get("locale", "fa")
    if channel not in channel_names() or not (len(locale) == 2 and locale.isalpha() and locale.islower()):
        raise ApiError(400, "invalid_filter", _("Choose a channel and a two-letter locale."))
    with get_db().connection() as conn:
        draft = templates.versions(conn, key, scope["tenant_id"])
        layers = templates.layers(conn, key, scope["tenant_id"])
    # A tenant's first draft starts from what its recipients get today: the platform's version.
    current = next((v for v in draft if v["channel"] == channel and v["locale"] == locale and v["status"] == "draft"),
                   None)
    if current is None:
        found = layers.pick(channel, [locale, render.FALLBACK_LOCALE])
        current = found[2] if found and found[0] != render.SHIPPED else None
    form = {"subject": current["subject"] if current else "", "body": current["body"] if current else "",
            "variables": ", ".join(current["variables"]) if current else "",
            "sample": json.dumps(current["sample"] if current else {}, ensure_ascii=False, indent=1)}
    ctx = _preview_context(key, channel, locale, form, scope)
    return render_template("templates/edit.html", key=key, channel=channel, locale=locale, form=form,
                           draft=current if current and current.get("status") == "draft" else None, scope=scope,
                           **ctx)


def _preview_context(key: str, channel: str, locale: str, form: dict, scope: dict) -> dict:
    """Every channel of the key rendered in ``locale`` and in ``fa``, the edited one from the form; the
    other cells show what the scope's recipients would get (a tenant's own version, else the platform's,
    else the shipped text), and the diff is against the version the draft would replace for them."""
    sample = _sample(form.get("sample"))
    try:
        declared = templates.parse_variables(form.get("variables", ""))
    except OpsError as exc:
        declared, var_error = [], human_message(exc)
    else:
        var_error = None
    with get_db().connection() as conn:
        versions = templates.versions(conn, key, scope["tenant_id"])
        layers = templates.layers(conn, key, scope["tenant_id"])
    # What a recipient of this scope gets for each (channel, locale): the first layer's version.
    live = {}
    for ch in channel_names():
        for loc in layers.locales(ch):
            found = layers.pick(ch, [loc])
            if found is not None and found[0] != render.SHIPPED:
                live[(ch, loc)] = found[2]
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
        ctx = _preview_context(key, channel, locale, form, _scope())
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
    return redirect(url_for("templates.edit", key=key, channel=request.form.get("channel", "inbox"), locale="fa",
                            tenant=request.form.get("tenant") or None), 303)


@bp.route("/<key>/draft", methods=["POST"])
@requires("templates.edit")
def save(key):
    key = _key_arg(key)
    scope = _scope()
    edit_scope = _require_edit(scope["tenant_id"])
    channel, locale = request.form.get("channel", ""), request.form.get("locale", "")
    with get_db().connection() as conn:
        row = templates.save_draft(conn, forms.actor(), key, channel, locale,
                                   subject=request.form.get("subject", ""), body=request.form.get("body", ""),
                                   variables=request.form.get("variables", ""),
                                   sample=_sample(request.form.get("sample")),
                                   tenant_id=scope["tenant_id"], scope=edit_scope)
    return redirect(url_for("templates.edit", key=key, channel=row["channel"], locale=row["locale"], saved=1,
                            tenant=scope["slug"]), 303)


def _version_for_edit(conn, template_id) -> TenantScope:
    """The version's own tenant decides (never the page's ``tenant``): 404 when the user cannot see it,
    403 (audited) when they may see but not write it (a platform version, for a tenant's author)."""
    try:
        row = templates.get(conn, template_id)
    except OpsError:
        raise ApiError(404, "not_found", _("No such template version.")) from None
    if row["tenant_id"] is not None and not current_scope("templates.view").allows(row["tenant_id"]):
        audit_denied("templates.edit", row["tenant_id"])
        raise ApiError(403, "forbidden", _("Your role does not allow %(permission)s for this tenant.",
                                           permission="templates.edit"))
    return _require_edit(row["tenant_id"])


@bp.route("/<key>/publish/<uuid:template_id>", methods=["POST"])
@requires("templates.edit")
def publish(key, template_id):
    """Publish a draft.  From htmx (the editor, the versions page) a refusal (a broken draft: 422) goes
    into the form's result slot, where the author is; success goes to the versions page."""
    with get_db().connection() as conn:
        edit_scope = _version_for_edit(conn, template_id)
        row = templates.publish(conn, template_id, forms.actor(), forms.reason(), forms.request_key(),
                                scope=edit_scope)
    target = url_for("templates.detail", key=row["key"], published=row["version"],
                     tenant=request.values.get("tenant") or None)
    if request.headers.get("HX-Request"):
        response = current_app.response_class("", status=200)
        response.headers["HX-Redirect"] = target
        return response
    return redirect(target, 303)


@bp.route("/<key>/rollback/<uuid:template_id>", methods=["POST"])
@requires("templates.edit")
def rollback(key, template_id):
    with get_db().connection() as conn:
        edit_scope = _version_for_edit(conn, template_id)
        row = templates.rollback(conn, template_id, forms.actor(), forms.reason(), forms.request_key(),
                                 scope=edit_scope)
    return redirect(url_for("templates.detail", key=row["key"], published=row["version"],
                            tenant=request.values.get("tenant") or None), 303)
