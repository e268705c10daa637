"""Schema migrations: ``migrations/NNNN_name.sql`` applied in order, once.

Each file runs in its own transaction together with its row in
``schema_migrations`` (version, name, SHA-256 checksum), so a failed file
leaves nothing behind.  Landed migrations are append-only: when the checksum
of an applied file changed, :func:`migrate` refuses to run and the web app's
``/readyz`` reports not ready.  Two processes that start at once serialize on a
session advisory lock; the second finds nothing left to do.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .config import resource_dir
from .db import connect

#: Advisory lock key held while migrating ("opsboard" in ASCII, as a bigint).
MIGRATE_LOCK_KEY = 0x6F7073626F617264

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


class MigrationError(Exception):
    """The migrations on disk and in the database disagree, or one failed."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path
    checksum: str

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass
class MigrationStatus:
    applied: list[int] = field(default_factory=list)
    pending: list[Migration] = field(default_factory=list)
    #: Applied versions whose file changed since.
    changed: list[Migration] = field(default_factory=list)
    #: Applied versions with no file here (the database is newer than this code).
    unknown: list[int] = field(default_factory=list)

    @property
    def current(self) -> bool:
        return not self.pending and not self.changed


def discover(directory: Path | None = None) -> list[Migration]:
    """The migration files of ``directory`` (default: the packaged
    ``migrations/``), in version order.  None found is an error: an install
    without its migrations must not report the database as up to date."""
    if directory is None:
        directory = resource_dir("migrations")
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        m = _FILE_RE.match(path.name)
        if not m:
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        version = int(m.group(1))
        if version in found:
            raise MigrationError(f"{path.name}: version {version} is used twice")
        checksum = hashlib.sha256(path.read_bytes()).hexdigest()
        found[version] = Migration(version, m.group(2), path, checksum)
    if not found:
        raise MigrationError(f"no migration files in {directory}; is the installation complete?")
    return [found[v] for v in sorted(found)]


#: Checksums of a landed file's one mistaken edit, still accepted for databases
#: that applied it: 0012 shipped for a while without ``ticket_user_tokens``; the
#: file is back as it first landed and 0023 drops that table where it exists, so
#: both histories end at the same schema.  Never add to this to excuse a new edit.
SUPERSEDED_CHECKSUMS: dict[int, frozenset[str]] = {
    12: frozenset({"3fb8e6f2fb7b82ff3cbc7b472a636514c5bfbbc59bcbf46e85bee6dcf34c59d0"}),
}


def status(conn: psycopg.Connection, directory: Path | None = None) -> MigrationStatus:
    """Compare the files with ``schema_migrations`` without changing anything."""
    files = discover(directory)
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS e").fetchone()
    applied: dict[int, str] = {}
    if exists and (exists["e"] if isinstance(exists, dict) else exists[0]):
        for row in conn.execute("SELECT version, checksum FROM schema_migrations ORDER BY version"):
            version, checksum = (row["version"], row["checksum"]) if isinstance(row, dict) else row
            applied[version] = checksum
    result = MigrationStatus(applied=sorted(applied))
    by_version = {m.version: m for m in files}
    for m in files:
        if m.version not in applied:
            result.pending.append(m)
        elif applied[m.version] != m.checksum and applied[m.version] not in SUPERSEDED_CHECKSUMS.get(m.version, ()):
            result.changed.append(m)
    result.unknown = [v for v in applied if v not in by_version]
    return result


def migrate(url: str, directory: Path | None = None, *, log=print) -> list[Migration]:
    """Apply every pending migration; return those applied by this call.

    Migrations see every tenant's rows (the owner is held to row-level security too: FORCE)."""
    from .tenancy import Bypass, bypass
    with bypass(Bypass.SETUP):
        return _migrate(url, directory, log=log)


def _migrate(url: str, directory: Path | None, *, log) -> list[Migration]:
    discover(directory)  # none found: fail before touching the database
    conn = connect(url)
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_KEY,))
        try:
            conn.execute(_CREATE_TABLE)
            current = status(conn, directory)
            if current.changed:
                names = ", ".join(m.path.name for m in current.changed)
                raise MigrationError(
                    f"applied migration changed on disk: {names}; landed migrations are append-only, "
                    "add a new file instead")
            done = []
            for m in current.pending:
                try:
                    with conn.transaction():
                        conn.execute(m.sql)
                        conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                            (m.version, m.name, m.checksum))
                except psycopg.Error as exc:
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise MigrationError(f"{m.path.name} failed: {first}") from None
                log(f"applied {m.path.name}")
                done.append(m)
            return done
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
    finally:
        conn.close()


_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def ensure_roles(url: str, owner: str, app: str, *, grant_creator: bool = False) -> str:
    """Run :func:`roles_sql` on the database at ``url`` (as a superuser) and return ``url`` as the
    application role.  Several processes may do it at once on one server (tests, benchmarks): the
    roles are the server's, so a race on creating or altering them is tried again.  With
    ``grant_creator``, tables the connecting user creates later (a test's own table) are the app's too."""
    import time

    from psycopg.conninfo import make_conninfo
    for attempt in range(20):
        try:
            with psycopg.connect(url, autocommit=True) as c:
                c.execute(roles_sql(owner, app))
                if grant_creator:
                    c.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public "
                              f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}")
                    c.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {app}")
            return make_conninfo(url, user=app)
        except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation, psycopg.errors.InternalError_):
            time.sleep(0.1 * (attempt + 1))  # another process created or altered a role at that moment
    raise MigrationError(f"could not set up the roles {owner} and {app}")


def roles_sql(owner: str = "opsboard_owner", app: str = "opsboard_app") -> str:
    """SQL (for a superuser, once per database) that sets up two roles.

    ``owner`` owns the schema and every object in it and runs ``opsboard
    migrate``; only it (or a superuser) can alter tables or disable triggers.
    ``app`` is what the web app and the workers connect as: it reads and
    writes the tables, but may neither change nor delete audit records (no
    UPDATE, DELETE or TRUNCATE on ``audit_log``), nor write
    ``schema_migrations``, nor own, alter or create anything (so no trigger
    can be disabled through it).  Default privileges give ``app`` the same
    rights on tables later migrations create.  Idempotent: run it again after
    each migration that adds an append-only table.
    """
    for name in (owner, app):
        if not _ROLE_NAME.match(name):
            raise ValueError(f"{name!r} is not a plain role name (lowercase letters, digits, _)")
    if owner == app:
        raise ValueError("the owner and the application role must differ")
    from .db import SESSION_SETTINGS
    role_settings = "\n".join(f"ALTER ROLE {app} SET {name} = {value};" for name, value in SESSION_SETTINGS.items())
    return f"""\
-- opsboard database roles.  Run as a superuser, connected to the opsboard database:
--   opsboard migrate --print-roles-sql | psql -v ON_ERROR_STOP=1 "$SUPERUSER_DATABASE_URL"
-- then give both roles a password (psql: \\password {owner}, \\password {app}),
-- run `opsboard migrate` with DATABASE_URL as {owner}, and the web app and
-- workers with DATABASE_URL as {app}.

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{owner}') THEN
        CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{app}') THEN
        CREATE ROLE {app} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO {owner}, {app}', current_database());
END
$roles$;

-- The owner owns the schema and everything already in it (tables, sequences
-- not tied to a column, types, functions).
ALTER SCHEMA public OWNER TO {owner};
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
DO $owner$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
               AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')
                               AND c.relkind = 'S')
    LOOP
        EXECUTE format('ALTER %s public.%I OWNER TO {owner}',
                       CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                      WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END, r.relname);
    END LOOP;
    FOR r IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE n.nspname = 'public' AND t.typtype = 'e'
    LOOP
        EXECUTE format('ALTER TYPE public.%I OWNER TO {owner}', r.typname);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS sig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'public'
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO {owner}', r.sig);
    END LOOP;
END
$owner$;

-- The application role: data, not structure.  No TRUNCATE, TRIGGER or
-- REFERENCES anywhere; audit records and the migration history read-only
-- except for appending audit records.
GRANT USAGE ON SCHEMA public TO {app};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {app};
REVOKE UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON audit_log FROM {app};
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON schema_migrations FROM {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO {app};

-- The application role's session settings, on the role: every session gets them, also
-- through a transaction pooler (PgBouncer), which cannot carry those sent at connect.
{role_settings}
"""
