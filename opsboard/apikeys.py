"""API keys: per-tenant bearer tokens for the HTTP API.

A key is ``obk_`` + 43 random characters, shown once at creation and stored
only as its SHA-256 (:func:`opsboard.auth.create_api_key`).  Creation and
revocation are audited; each use records ``last_used_at`` (at most every 10
seconds per key).
"""
from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

import psycopg

from . import audit, auth, db
from .auth import TenantScope


class ApiKeyError(ValueError):
    """A refused key operation; ``code`` is stable."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def create(conn: psycopg.Connection, tenant_id, name: str, actor: audit.Actor) -> tuple[str, dict]:
    """Create a key for ``tenant_id``; returns ``(secret, row)``.  The secret is never stored or logged."""
    name = (name or "").strip()
    if not 0 < len(name) <= 100:
        raise ApiKeyError("invalid_name", "the key's name must be 1 to 100 characters")
    with conn.transaction():
        secret, row = auth.create_api_key(conn, tenant_id, name, [], created_by=actor.id)
        audit.record(conn, actor, "apikey.create", target_type="api_key", target_id=row["id"], tenant_id=tenant_id,
                     after={"name": name, "prefix": row["prefix"]})
    return secret, row


def revoke(conn: psycopg.Connection, key_id, actor: audit.Actor, scope: TenantScope, *,
           reason: str | None = None, now: datetime | None = None) -> dict:
    """Revoke a key inside ``scope``; raises :class:`ApiKeyError` (``not_found``) otherwise."""
    try:
        kid = uuid.UUID(str(key_id))
    except ValueError:
        raise ApiKeyError("not_found", "no such API key") from None
    with conn.transaction():
        row = db.one(conn, "api_key_revoke", {"id": kid, "now": now, **scope.params})
        if row is None:
            existing = db.one(conn, "api_key_get", {"id": kid, **scope.params})
            if existing is None:
                raise ApiKeyError("not_found", "no such API key")
            return existing  # already revoked: revoking twice is harmless
        audit.record(conn, actor, "apikey.revoke", target_type="api_key", target_id=kid, tenant_id=row["tenant_id"],
                     reason=reason, before={"name": row["name"], "prefix": row["prefix"]})
    return row


def list_keys(conn: psycopg.Connection, scope: TenantScope) -> list[dict]:
    """Keys of the tenants in ``scope`` (prefix, name, dates; never the hash)."""
    return db.all_rows(conn, "api_key_list", scope.params)


def authenticate(conn: psycopg.Connection, secret: str, now: datetime | None = None) -> dict | None:
    """The live key (with ``tenant_id`` and ``tenant_slug``) for a presented secret, or ``None``."""
    if not secret or not secret.startswith("obk_") or len(secret) > 200:
        return None
    return db.one(conn, "api_key_authenticate", {"key_hash": hashlib.sha256(secret.encode()).digest(), "now": now})
