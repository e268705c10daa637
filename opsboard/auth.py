"""Users, roles, tenant membership and permission checks.

A user holds roles through memberships (user x tenant x role, active flag).
Permissions come from the role -> permission table below.  A permission held
through a membership applies to that tenant; held through a membership of an
*operator* tenant (the platform's own staff) it applies to every tenant.
Every query that reads tenant data takes the caller's :class:`TenantScope`.
"""
from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from werkzeug.security import check_password_hash, generate_password_hash

from . import db, tenancy
from .errors import OpsError
from .schema import Role, new_id

#: What each role may do.  Views and core actions check these names.
ROLE_PERMISSIONS: dict[Role, frozenset[str]] = {
    Role.ADMIN: frozenset({
        "dashboard.view", "audit.view", "jobs.view", "jobs.replay", "jobs.resolve", "jobs.cancel", "jobs.pause",
        "tenants.view", "workers.view", "alerts.view", "alerts.ack",
        "tickets.view", "tickets.work", "templates.view", "templates.edit", "users.manage",
        "reports.view", "reports.request",
        "webhooks.manage",
    }),
    Role.OPS: frozenset({
        "dashboard.view", "audit.view", "jobs.view", "jobs.replay", "jobs.resolve", "jobs.cancel", "jobs.pause",
        "tenants.view", "workers.view", "alerts.view", "alerts.ack",
        "reports.view", "reports.request",
    }),
    Role.SUPPORT_AGENT: frozenset({"dashboard.view", "tickets.view", "tickets.work"}),
    Role.TEMPLATE_AUTHOR: frozenset({"dashboard.view", "templates.view", "templates.edit"}),
    Role.MEMBER: frozenset({"inbox.view"}),
}

ALL_PERMISSIONS = frozenset().union(*ROLE_PERMISSIONS.values())

_DUMMY_HASH = generate_password_hash("opsboard-timing-equaliser")


class AuthError(Exception):
    """A user-facing error in account management (bad email, unknown tenant...)."""


class LoginThrottled(Exception):
    """Too many failed logins for this account or address; ``retry_after`` in seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"too many failed logins; try again in {retry_after} seconds")
        self.retry_after = retry_after


@dataclass(frozen=True)
class TenantScope:
    """Which tenants a caller may see: all of them, or the listed ids."""

    all: bool
    ids: tuple[uuid.UUID, ...] = ()

    @property
    def params(self) -> dict:
        """Parameters for ``(%(scope_all)s OR tenant_id = ANY(%(scope_ids)s))`` in SQL."""
        return {"scope_all": self.all, "scope_ids": list(self.ids)}

    def allows(self, tenant_id) -> bool:
        return self.all or (tenant_id is not None and uuid.UUID(str(tenant_id)) in self.ids)


@dataclass(frozen=True)
class Membership:
    tenant_id: uuid.UUID
    tenant_slug: str
    tenant_name: str
    is_operator: bool
    role: Role


@dataclass
class Principal:
    """A signed-in user with their memberships.

    Duck-types flask-login's user protocol so the core does not import Flask.
    """

    id: uuid.UUID
    email: str
    display_name: str
    memberships: list[Membership] = field(default_factory=list)
    is_active: bool = True
    #: The browser session this principal was loaded for (see :func:`start_session`).
    session_id: str | None = None
    #: Dashboard language, calendar and time zone (None = the defaults; migration 0014).
    locale: str | None = None
    calendar: str | None = None
    time_zone: str | None = None

    is_authenticated = True
    is_anonymous = False

    def get_id(self) -> str:
        """What the session cookie stores: ``<user id>:<session id>``."""
        return f"{self.id}:{self.session_id}" if self.session_id else str(self.id)

    @property
    def label(self) -> str:
        return self.email

    @property
    def roles(self) -> set[Role]:
        return {m.role for m in self.memberships}

    @property
    def permissions(self) -> frozenset[str]:
        return frozenset().union(*(ROLE_PERMISSIONS[m.role] for m in self.memberships)) if self.memberships else frozenset()

    def has(self, permission: str) -> bool:
        """Holds ``permission`` in at least one tenant."""
        if permission not in ALL_PERMISSIONS:
            raise ValueError(f"unknown permission {permission!r}")
        return permission in self.permissions

    def can(self, permission: str, tenant_id) -> bool:
        """Holds ``permission`` for ``tenant_id`` (directly or as operator staff)."""
        if permission not in ALL_PERMISSIONS:
            raise ValueError(f"unknown permission {permission!r}")
        tid = uuid.UUID(str(tenant_id)) if tenant_id is not None else None
        for m in self.memberships:
            if permission in ROLE_PERMISSIONS[m.role] and (m.is_operator or m.tenant_id == tid):
                return True
        return False

    def scope(self, permission: str = "dashboard.view") -> TenantScope:
        """The tenants in which this user holds ``permission``."""
        granting = [m for m in self.memberships if permission in ROLE_PERMISSIONS[m.role]]
        if any(m.is_operator for m in granting):
            return TenantScope(all=True)
        return TenantScope(all=False, ids=tuple(sorted({m.tenant_id for m in granting})))


def hash_password(password: str) -> str:
    """scrypt through werkzeug (salted, memory-hard)."""
    return generate_password_hash(password, method="scrypt")


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    if "@" not in email or email.startswith("@") or len(email) > 254 or any(c.isspace() for c in email):
        raise AuthError(f"{email!r} is not an email address")
    return email


def ensure_tenant(conn: psycopg.Connection, slug: str, name: str | None = None, *,
                  is_operator: bool = False, weight: int = 1) -> dict:
    """The tenant with ``slug``, created when missing."""
    row = db.one(conn, "tenant_get_by_slug", {"slug": slug})
    if row:
        return row
    try:
        with conn.transaction():
            return db.one(conn, "tenant_insert", {"id": new_id(), "slug": slug, "name": name or slug,
                                                  "is_operator": is_operator, "weight": weight})
    except psycopg.errors.CheckViolation:
        raise AuthError(f"tenant slug {slug!r} must be lowercase letters, digits and dashes") from None
    except psycopg.errors.UniqueViolation:
        return db.one(conn, "tenant_get_by_slug", {"slug": slug})


def create_user(conn: psycopg.Connection, email: str, password: str, role: str, tenant_slug: str,
                *, display_name: str = "") -> dict:
    """Create a user (or reuse one with that email) and grant ``role`` in the tenant."""
    email = normalize_email(email)
    try:
        role_enum = Role(role)
    except ValueError:
        raise AuthError(f"role {role!r} is not one of {', '.join(r.value for r in Role)}") from None
    if len(password) < 8:
        raise AuthError("password must have at least 8 characters")
    with conn.transaction():
        tenant = db.one(conn, "tenant_get_by_slug", {"slug": tenant_slug})
        if not tenant:
            raise AuthError(f"tenant {tenant_slug!r} does not exist")
        user = db.one(conn, "user_get_by_email", {"email": email})
        if user is None:
            user = db.one(conn, "user_insert", {"id": new_id(), "email": email,
                                                "display_name": display_name or email.split("@")[0],
                                                "password_hash": hash_password(password)})
        elif not check_password_hash(user["password_hash"], password):
            set_password(conn, user["id"], password)  # a new password ends the old sessions
        db.execute(conn, "membership_upsert", {"user_id": user["id"], "tenant_id": tenant["id"],
                                               "role": role_enum.value})
    return {"id": user["id"], "email": email, "role": role_enum.value, "tenant": tenant_slug}


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def load_principal(conn: psycopg.Connection, user_id) -> Principal | None:
    """The active user with ``user_id`` and their active memberships."""
    try:
        uid = uuid.UUID(str(user_id))
    except ValueError:
        return None
    user = db.one(conn, "user_get", {"id": uid})
    if not user or not user["is_active"]:
        return None
    rows = db.all_rows(conn, "membership_list_for_user", {"user_id": uid})
    return Principal(
        id=user["id"], email=user["email"], display_name=user["display_name"],
        locale=user.get("locale"), calendar=user.get("calendar"), time_zone=user.get("time_zone"),
        memberships=[Membership(r["tenant_id"], r["tenant_slug"], r["tenant_name"], r["is_operator"], Role(r["role"]))
                     for r in rows],
    )


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def authenticate(conn: psycopg.Connection, email: str, password: str, address: str, *,
                 max_account: int = 5, max_address: int = 20, window_seconds: int = 900,
                 now: datetime | None = None) -> Principal | None:
    """Check a login; ``None`` when wrong.  Raises :class:`LoginThrottled`.

    Attempts are counted per account and per client address in the database,
    so the limit holds across every web process.  Counting and recording an
    attempt is one atomic step: under advisory transaction locks of the
    account and of the address, the attempt is counted and then inserted
    *before* the (slow) password check, so that simultaneous requests cannot
    all pass the count; a success deletes its row again.  At most
    ``max_account`` passwords of one account are checked per window.  The
    password is checked even for unknown accounts so that timing does not
    reveal which emails exist.
    """
    email = (email or "").strip().lower()
    params = {"email": email, "address": address, "window": window_seconds, "now": now}
    with conn.transaction():
        db.execute(conn, "login_lock_account", params)
        db.execute(conn, "login_lock_address", params)
        counts = db.one(conn, "login_failure_counts", params)
        if counts["account"] >= max_account or counts["address"] >= max_address:
            newest = counts["newest"]
            current = db.now(conn, now)
            retry = max(1, int(window_seconds - (current - newest).total_seconds())) if newest else window_seconds
            raise LoginThrottled(retry)
        attempt = db.one(conn, "login_attempt_insert", params)
    user = db.one(conn, "user_get_by_email", {"email": email}) if email else None
    ok = check_password_hash(user["password_hash"] if user else _DUMMY_HASH, password or "")
    if not user or not ok or not user["is_active"]:
        return None  # the attempt row stays: it is the failure
    with conn.transaction():
        db.execute(conn, "login_attempt_delete", {"id": attempt["id"]})
        db.execute(conn, "login_failure_clear_account", {"email": email})
        db.execute(conn, "user_touch_login", {"id": user["id"]})
    return load_principal(conn, user["id"])


def _session_hash(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


def start_session(conn: psycopg.Connection, principal: Principal, lifetime_seconds: int,
                  now: datetime | None = None) -> Principal:
    """Open a server-side session for ``principal``; returns it carrying the new session id.

    The id travels in the signed cookie (``Principal.get_id``); only its hash
    is stored.  Expired sessions are forgotten on the way.
    """
    session_id = secrets.token_urlsafe(24)
    with conn.transaction():
        db.execute(conn, "session_prune", {"now": now})
        db.execute(conn, "session_insert", {"id_hash": _session_hash(session_id), "user_id": principal.id,
                                            "lifetime": lifetime_seconds, "now": now})
    principal.session_id = session_id
    return principal


def end_session(conn: psycopg.Connection, session_id: str | None) -> None:
    """End one session: a copy of its cookie no longer signs anybody in."""
    if session_id:
        db.execute(conn, "session_delete", {"id_hash": _session_hash(session_id)})


def end_all_sessions(conn: psycopg.Connection, user_id) -> int:
    """End every session of a user ("sign out everywhere"); returns how many were live."""
    return db.execute(conn, "session_delete_for_user", {"user_id": user_id}).rowcount


@tenancy.bypassing(tenancy.Bypass.AUTHENTICATION)
def load_session_principal(conn: psycopg.Connection, stored_id: str, now: datetime | None = None) -> Principal | None:
    """The principal of a session cookie's ``<user id>:<session id>``, or ``None``
    when the session was ended, has expired, or the user is inactive."""
    user_id, _, session_id = (stored_id or "").partition(":")
    if not session_id:
        return None  # a cookie from before server-side sessions: sign in again
    try:
        uid = uuid.UUID(user_id)
    except ValueError:
        return None
    if not db.one(conn, "session_is_live", {"id_hash": _session_hash(session_id), "user_id": uid, "now": now}):
        return None
    principal = load_principal(conn, uid)
    if principal is not None:
        principal.session_id = session_id
    return principal


def set_display_prefs(conn: psycopg.Connection, user_id, *, locale: str | None, calendar: str | None,
                      time_zone: str | None) -> None:
    """Save a user's dashboard language, calendar and time zone (None = the default)."""
    from .persian import CALENDARS, LOCALES, valid_timezone

    if locale is not None and locale not in LOCALES:
        raise OpsError("locale must be one of %(names)s", "bad_locale", params={"names": ", ".join(LOCALES)})
    if calendar is not None and calendar not in CALENDARS:
        raise OpsError("calendar must be one of %(names)s", "bad_calendar", params={"names": ", ".join(CALENDARS)})
    if time_zone is not None and not valid_timezone(time_zone):
        raise OpsError("unknown time zone", "bad_time_zone")
    db.one(conn, "user_set_display_prefs", {"id": user_id, "locale": locale, "calendar": calendar,
                                            "time_zone": time_zone})


def set_password(conn: psycopg.Connection, user_id, password: str) -> None:
    """Replace a user's password and end all their sessions."""
    if len(password) < 8:
        raise AuthError("password must have at least 8 characters")
    with conn.transaction():
        db.execute(conn, "user_set_password", {"id": user_id, "password_hash": hash_password(password)})
        end_all_sessions(conn, user_id)


def set_user_active(conn: psycopg.Connection, user_id, active: bool) -> bool:
    """Activate or deactivate a user; deactivation ends all their sessions.  False when no such user."""
    with conn.transaction():
        row = db.one(conn, "user_set_active", {"id": user_id, "active": active})
        if row and not active:
            end_all_sessions(conn, user_id)
    return row is not None


def session_count(conn: psycopg.Connection, user_id) -> int:
    """How many live sessions the user has."""
    return db.one(conn, "user_count_sessions", {"user_id": user_id})["n"]


def create_api_key(conn: psycopg.Connection, tenant_id, name: str, scopes: list[str], created_by=None) -> tuple[str, dict]:
    """Create an API key; returns the secret (shown once) and the stored row."""
    secret = "obk_" + secrets.token_urlsafe(32)
    row = db.one(conn, "api_key_insert", {
        "id": new_id(), "tenant_id": tenant_id, "name": name, "prefix": secret[:10],
        "key_hash": hashlib.sha256(secret.encode()).digest(), "scopes": scopes, "created_by": created_by})
    return secret, row
