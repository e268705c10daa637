"""Versioned notification templates: drafts, publish, roll back, the live version.

A template is ``key x channel x locale x version``.  A draft (at most one per
key x channel x locale) is edited in place; :func:`publish` checks it
(syntax, sandbox safety, every variable used declared, renders with its
sample) and freezes it -- the database refuses any change to a published row.
:func:`rollback` publishes a copy of an earlier version as a new version, so
the history never changes.  The live version is the highest published one.
Publish and roll back go through :func:`opsboard.audit.operator_action`.
Every key needs a ``fa`` version of each channel it uses: the locale chain
ends there (:func:`opsboard.notifications.render.locale_chain`).

Templates belong to a tenant or to the platform (``tenant_id`` NULL, migration 0070).  A tenant's
notification is rendered from the tenant's own live version, else the platform's, else the shipped
text (:func:`layers`, :class:`opsboard.notifications.render.Layers`), each with the locale chain.
Each scope numbers its versions and keeps its draft.  Who may write where is checked here too, from
the actor's :class:`~opsboard.auth.TenantScope` of ``templates.edit``: a tenant's versions need that
tenant in the scope, the platform's need the operator's scope (``scope.all``: an operator-tenant
membership).  The web checks first (and audits the refusal); the default scope is the trusted
callers' (CLI, demo, seeds).
"""
from __future__ import annotations

import difflib
import logging
import re

import psycopg
from psycopg.types.json import Jsonb

from .. import audit, channels, db
from ..auth import TenantScope
from ..channels import channel_names
from ..errors import OpsError
from ..schema import new_id
from . import render

_VAR_RE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def parse_variables(text) -> list[str]:
    """Declared variables from a list or a comma/space separated string; refuses bad names."""
    names = text if isinstance(text, (list, tuple)) else re.split(r"[\s,]+", text or "")
    out = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if not _VAR_RE.match(n):
            raise OpsError("variable name %(name)s must be lowercase letters, digits or '_'", "invalid_variable",
                           params={"name": repr(n)})
        if n not in out:
            out.append(n)
    return out


def _check_ids(key: str, channel: str, locale: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_.]{0,99}", key or ""):
        raise OpsError("template key must be lowercase letters, digits, '.' or '_'", "invalid_key")
    if channel not in channel_names():
        raise OpsError("channel must be one of %(names)s", "invalid_channel",
                       params={"names": ", ".join(channel_names())})
    if not re.fullmatch(r"[a-z]{2}", locale or ""):
        raise OpsError("locale must be two lowercase letters", "invalid_locale")


#: The scope of trusted callers (CLI, demo data, seeds, tests): may write the platform's and any tenant's.
TRUSTED = TenantScope(all=True)


def may_edit(scope: TenantScope, tenant_id) -> bool:
    """Whether ``scope`` (the actor's scope of ``templates.edit``) may write versions of ``tenant_id``
    (None: the platform's, which only the operator's authors may)."""
    return scope.all if tenant_id is None else scope.allows(tenant_id)


def _require_edit(scope: TenantScope, tenant_id) -> None:
    if not may_edit(scope, tenant_id):
        if tenant_id is None:
            raise OpsError("only the operator's template authors may change the platform's templates", "forbidden",
                           status=403)
        raise OpsError("your role does not allow changing this tenant's templates", "forbidden", status=403)


def live(conn: psycopg.Connection, key: str, tenant_id=None) -> dict[tuple[str, str], dict]:
    """The live version of each (channel, locale) of ``key`` in one scope: ``tenant_id``'s own versions,
    or the platform's (None)."""
    return {(r["channel"], r["locale"]): r
            for r in db.all_rows(conn, "template_live_for_key", {"key": key, "tenant_id": tenant_id})}


def layers(conn: psycopg.Connection, key: str, tenant_id) -> render.Layers:
    """What ``tenant_id``'s notifications of ``key`` are rendered from, in the lookup order: the tenant's
    own live versions, the platform's, the catalogue's shipped texts (one query)."""
    from .. import catalogue as _catalogue  # the bottom of the core: no cycle

    own, platform = {}, {}
    for r in db.all_rows(conn, "template_live_layers", {"key": key, "tenant_id": tenant_id}):
        (platform if r["tenant_id"] is None else own)[(r["channel"], r["locale"])] = r
    shipped = {(ch, loc): {"subject": t.subject, "body": t.body, "version": None}
               for (k, ch, loc), t in _catalogue.active().shipped_templates.items() if k == key}
    return render.Layers(own=own, platform=platform, shipped=shipped)


def keys(conn: psycopg.Connection, tenant_id=None) -> list[dict]:
    """The keys a scope sees: its own versions and, for a tenant, the platform's published ones."""
    return db.all_rows(conn, "template_keys", {"tenant_id": tenant_id})


def versions(conn: psycopg.Connection, key: str, tenant_id=None) -> list[dict]:
    """Every version of ``key`` in one scope (a tenant's own, or the platform's), newest first."""
    return db.all_rows(conn, "template_versions", {"key": key, "tenant_id": tenant_id})


def get(conn: psycopg.Connection, template_id) -> dict:
    row = db.one(conn, "template_get", {"id": template_id})
    if row is None:
        raise OpsError("no such template version", "not_found")
    return row


def save_draft(conn: psycopg.Connection, actor: audit.Actor, key: str, channel: str, locale: str, *,
               subject: str, body: str, variables, sample: dict | None = None, tenant_id=None,
               scope: TenantScope = TRUSTED) -> dict:
    """Create the draft of ``key x channel x locale`` in ``tenant_id``'s scope (None: the platform's;
    next version number of that scope) or update it; 403 ``forbidden`` outside ``scope``."""
    _require_edit(scope, tenant_id)
    _check_ids(key, channel, locale)
    declared = parse_variables(variables)
    if not isinstance(sample, (dict, type(None))):
        raise OpsError("the sample payload must be a JSON object", "invalid_sample")
    params = {"subject": subject or "", "body": body or "", "variables": declared, "sample": Jsonb(sample or {})}
    with conn.transaction():
        ids = {"key": key, "channel": channel, "locale": locale, "tenant_id": tenant_id}
        draft = db.one(conn, "template_draft_get", ids)
        if draft is not None:
            return db.one(conn, "template_draft_update", {"id": draft["id"], **params})
        version = db.one(conn, "template_next_version", ids)["version"]
        return db.one(conn, "template_insert", {"id": new_id(), **ids,
                                                "version": version, "status": "draft", "author_label": actor.label,
                                                "now": None, "rolled_back_from": None, **params})


def validate(tpl: dict) -> None:
    """Refuse (``OpsError`` with the problem's code) what cannot be published."""
    try:
        render.check_source(tpl["subject"], tpl["body"], tpl["variables"], tpl["channel"])
        missing = [v for v in tpl["variables"] if v not in (tpl["sample"] or {})]
        if missing:
            raise render.TemplateProblem("missing_variable", "the sample payload lacks declared variable(s): "
                                         + ", ".join(missing), missing[0])
        render.render(tpl["channel"], tpl["locale"], tpl["subject"], tpl["body"], tpl["sample"] or {})
    except render.TemplateProblem as exc:
        raise OpsError(str(exc), exc.code, status=422) from None
    entry = channels.get(tpl["channel"])
    if entry is not None and entry.subject and not tpl["subject"].strip():
        raise OpsError("inbox and email templates need a subject (the title)", "missing_subject", status=422)


def _get_for_edit(conn: psycopg.Connection, template_id, scope: TenantScope, *, lock: bool = False) -> dict:
    tpl = db.one(conn, "template_get_for_update" if lock else "template_get", {"id": template_id})
    if tpl is None:
        raise OpsError("no such template version", "not_found")
    _require_edit(scope, tpl["tenant_id"])
    return tpl


def publish(conn: psycopg.Connection, template_id, actor: audit.Actor, reason: str | None,
            request_key: str | None = None, *, scope: TenantScope = TRUSTED) -> dict:
    """Publish a draft (checked by :func:`validate`) in its own scope; audited (with the version's
    tenant) and idempotent per request key; 403 ``forbidden`` when the draft is outside ``scope``."""
    _get_for_edit(conn, template_id, scope)

    def perform(ctx: audit.ActionContext) -> dict:
        tpl = _get_for_edit(conn, template_id, scope, lock=True)
        if tpl["status"] != "draft":
            raise OpsError("this version is published already", "invalid_status")
        validate(tpl)
        row = db.one(conn, "template_publish", {"id": template_id, "now": None})
        ctx.write(tenant_id=row["tenant_id"], before={"status": "draft"},
                  after={"key": row["key"], "channel": row["channel"], "locale": row["locale"],
                         "version": row["version"], "status": "published",
                         "scope": "tenant" if row["tenant_id"] else "platform"})
        return row

    return audit.operator_action(conn, actor, "template.publish", target_type="template", target_id=template_id,
                                 reason=reason, request_key=request_key, perform=perform,
                                 repeat=lambda previous: get(conn, previous["target_id"]))


def rollback(conn: psycopg.Connection, template_id, actor: audit.Actor, reason: str | None,
             request_key: str | None = None, *, scope: TenantScope = TRUSTED) -> dict:
    """Publish a copy of the published version ``template_id`` as the new live version of its own scope
    (a tenant's, or the platform's); 403 ``forbidden`` when that scope is outside ``scope``."""
    _get_for_edit(conn, template_id, scope)

    def perform(ctx: audit.ActionContext) -> dict:
        old = _get_for_edit(conn, template_id, scope, lock=True)
        if old["status"] != "published":
            raise OpsError("only a published version can be rolled back to", "invalid_status")
        ids = {"key": old["key"], "channel": old["channel"], "locale": old["locale"], "tenant_id": old["tenant_id"]}
        current = live(conn, old["key"], old["tenant_id"]).get((old["channel"], old["locale"]))
        if current is not None and current["version"] == old["version"]:
            raise OpsError("this version is live already", "invalid_status")
        version = db.one(conn, "template_next_version", ids)["version"]
        row = db.one(conn, "template_insert", {
            "id": new_id(), **ids, "version": version, "subject": old["subject"], "body": old["body"],
            "variables": old["variables"], "sample": Jsonb(old["sample"]), "status": "published",
            "author_label": actor.label, "now": None, "rolled_back_from": old["version"]})
        ctx.write(tenant_id=old["tenant_id"], before={"live": current["version"] if current else None},
                  after={"key": old["key"], "channel": old["channel"], "locale": old["locale"], "version": version,
                         "copy_of": old["version"], "scope": "tenant" if old["tenant_id"] else "platform"})
        return row

    def repeat(previous: dict) -> dict:
        after = previous["after"]
        return live(conn, after["key"], previous.get("tenant_id")).get((after["channel"], after["locale"])) or {}

    return audit.operator_action(conn, actor, "template.rollback", target_type="template", target_id=template_id,
                                 reason=reason, request_key=request_key, perform=perform, repeat=repeat)


def seed(conn: psycopg.Connection, key: str, channel: str, locale: str, subject: str, body: str, variables,
         sample: dict | None = None, *, tenant_id=None) -> dict:
    """Publish a version directly (demo data, deployments; ``tenant_id`` None: the platform's): checked
    like :func:`publish`, not audited."""
    _check_ids(key, channel, locale)
    declared = parse_variables(variables)
    tpl = {"key": key, "channel": channel, "locale": locale, "subject": subject, "body": body,
           "variables": declared, "sample": sample or {v: v for v in declared}}
    validate(tpl)
    version = db.one(conn, "template_next_version", {"key": key, "channel": channel, "locale": locale,
                                                     "tenant_id": tenant_id})["version"]
    return db.one(conn, "template_insert", {"id": new_id(), **tpl, "tenant_id": tenant_id, "sample": Jsonb(tpl["sample"]),
                                            "version": version, "status": "published", "author_label": "seed",
                                            "now": None, "rolled_back_from": None})


def diff(old: dict | None, new: dict) -> list[str]:
    """A unified diff of subject + body between two versions (``old`` None: all added)."""
    def lines(t):
        return ([f"subject: {t['subject']}", f"variables: {', '.join(t['variables'])}"] + t["body"].splitlines()) if t else []
    return list(difflib.unified_diff(lines(old), lines(new), fromfile=f"v{old['version']}" if old else "(none)",
                                     tofile=f"v{new['version']}", lineterm=""))


def usage(conn: psycopg.Connection, key: str, tenant_id=None) -> list[dict]:
    """How many deliveries used each version of ``key``: a tenant's deliveries, per version of its own and
    of the platform's (``own``); for the platform (None), every tenant's deliveries of platform versions."""
    return db.all_rows(conn, "template_usage", {"key": key, "tenant_id": tenant_id})


def seed_at_start(conn: psycopg.Connection) -> None:
    """A worker's start hook (``catalogue.start_hooks``): :func:`seed_shipped`, saying what it published."""
    seeded = seed_shipped(conn)
    if seeded:
        logging.getLogger("worker").info("%d shipped template(s) published", len(seeded))


def seed_shipped(conn: psycopg.Connection, shipped: dict | None = None) -> list[dict]:
    """Seed the product's shipped templates (default: the active catalogue's ``shipped_templates``)
    as published version 1 wherever ``(key, channel, locale)`` has no version yet, and as the next
    version where only the product ever published it and its words changed since; returns the rows made.

    Idempotent and cheap when nothing is missing (one statement): ``opsboard migrate`` and every web
    and worker start call it.  A triple with any version (an author's draft, an edited or rolled back
    history) is left alone: shipped texts never overwrite an author's.  Processes starting together
    serialise on a transaction lock and look again under it.
    """
    from .. import catalogue as _catalogue  # the bottom of the core: no cycle

    shipped = _catalogue.active().shipped_templates if shipped is None else shipped
    if not shipped:
        return []

    def missing() -> list[tuple[str, str, str]]:
        triples = list(shipped)
        rows = db.all_rows(conn, "template_shipped_missing", {
            "keys": [t[0] for t in triples], "channels": [t[1] for t in triples],
            "locales": [t[2] for t in triples]})
        # A release that changed a shipped text publishes it as the next version where only the product
        # ever published the triple (issue 43: the alert texts written part by part reach upgraded
        # installations); an author's triple is never touched.
        rows += db.all_rows(conn, "template_shipped_stale", {
            "keys": [t[0] for t in triples], "channels": [t[1] for t in triples],
            "locales": [t[2] for t in triples], "subjects": [shipped[t].subject for t in triples],
            "bodies": [shipped[t].body for t in triples]})
        return [(r["key"], r["channel"], r["locale"]) for r in rows]

    if not missing():
        return []
    made = []
    with conn.transaction():
        db.one(conn, "template_seed_lock")
        for triple in missing():
            t = shipped[triple]
            made.append(seed(conn, t.key, t.channel, t.locale, t.subject, t.body, t.variables, t.sample))
    return made
