"""API keys: per-tenant bearer tokens for the HTTP API.

A key is ``obk_`` + 43 random characters, shown once at creation and stored
only as its SHA-256 (:func:`opsboard.auth.create_api_key`).  Creation and
revocation are audited; each use records ``last_used_at`` (at most every 10
seconds per key).

The HTTP API looks keys up through :func:`authenticate_cached`: a process
trusts a key it has found for :data:`CACHE_SECONDS`, so a busy client costs
no round trip for its key.  A key revoked through :func:`revoke` stops working
in this process at once, and in every other process (gunicorn workers, other
hosts) within :data:`CACHE_SECONDS`.  Unknown and revoked keys are never
cached: every refused request asks the database.
"""
from __future__ import annotations

import hashlib
import threading
import time
import uuid
from datetime import datetime
from typing import Callable, ContextManager

import psycopg

from . import audit, auth, db, tenancy
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
    forget(kid)
    return row


def list_keys(conn: psycopg.Connection, scope: TenantScope) -> list[dict]:
    """Keys of the tenants in ``scope`` (prefix, name, dates; never the hash)."""
    return db.all_rows(conn, "api_key_list", scope.params)


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def authenticate(conn: psycopg.Connection, secret: str, now: datetime | None = None) -> dict | None:
    """The live key (with ``tenant_id`` and ``tenant_slug``) for a presented secret, or ``None``."""
    key_hash = _key_hash(secret)
    if key_hash is None:
        return None
    return db.one(conn, "api_key_authenticate", {"key_hash": key_hash, "now": now})


def _key_hash(secret: str) -> bytes | None:
    if not secret or not secret.startswith("obk_") or len(secret) > 200:
        return None
    return hashlib.sha256(secret.encode()).digest()


#: How long a process trusts a key it found: a key revoked by another process works here at most this long.
CACHE_SECONDS = 2.0
_CACHE_MAX = 10_000
_cache: dict[tuple[str, bytes], tuple[float, dict]] = {}
_cache_lock = threading.Lock()
_clock = time.monotonic


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def authenticate_cached(connection: Callable[[], ContextManager[psycopg.Connection]], secret: str,
                        database: str) -> dict | None:
    """:func:`authenticate`, trusting a found key for :data:`CACHE_SECONDS` in this process.

    ``connection`` checks out a connection (only on a miss); ``database`` names the database (its URL),
    so that one process serving two databases (tests) never mixes their keys.  The key's last use is
    recorded on each miss, so at most :data:`CACHE_SECONDS` + 10 s late.
    """
    key_hash = _key_hash(secret)
    if key_hash is None:
        return None
    slot = (database, key_hash)
    hit = _cache.get(slot)
    if hit is not None and _clock() < hit[0]:
        return hit[1]
    with connection() as conn:
        row = db.one(conn, "api_key_authenticate", {"key_hash": key_hash, "now": None})
    with _cache_lock:
        if row is None:
            _cache.pop(slot, None)
        else:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[slot] = (_clock() + CACHE_SECONDS, row)
    return row


def forget(key_id) -> None:
    """Drop a key from this process's cache (it was revoked here)."""
    with _cache_lock:
        for slot in [s for s, (_, row) in _cache.items() if str(row["id"]) == str(key_id)]:
            del _cache[slot]


PII_MODES = ("refuse", "redact")


def set_pii_mode(conn: psycopg.Connection, tenant_id, mode: str, actor: audit.Actor) -> dict:
    """Set the tenant's ``pii_mode`` (``refuse`` or ``redact``: what the API does with personal data in
    its event and job payloads, see :mod:`opsboard.personal_data`), audited.

    The mode travels with the API key (:func:`authenticate`): this process forgets the tenant's
    cached keys at once, other processes apply it within :data:`CACHE_SECONDS`.
    """
    if mode not in PII_MODES:
        raise ApiKeyError("invalid_pii_mode", "pii_mode must be refuse or redact")
    with conn.transaction():
        row = db.one(conn, "tenant_set_pii_mode", {"id": tenant_id, "mode": mode})
        if row is None:
            raise ApiKeyError("not_found", "no such tenant")
        audit.record(conn, actor, "tenant.pii_mode", target_type="tenant", target_id=tenant_id, tenant_id=tenant_id,
                     before={"pii_mode": row["before"]}, after={"pii_mode": row["after"]})
    with _cache_lock:
        for slot in [s for s, (_, key) in _cache.items() if str(key["tenant_id"]) == str(tenant_id)]:
            del _cache[slot]
    return row
