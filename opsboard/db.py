"""Database access: the connection pool, transactions, named queries and the
embedded PostgreSQL used when no ``DATABASE_URL`` is configured.

Queries live in ``opsboard/sql/<area>.sql`` as named blocks::

    -- name: job_claim_many
    -- Claim up to %(limit)s ready jobs of one queue.
    WITH ...;

They are parsed once into :data:`queries`; callers run them by name with
``%(name)s`` parameters through :func:`execute`, :func:`one` and :func:`all_rows`.
Connections are in autocommit mode with dict rows; a unit of work that must be
atomic runs inside :meth:`Database.transaction` (or ``conn.transaction()``).
"""
from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader
from psycopg_pool import ConnectionPool

from . import tenancy

try:
    from json.scanner import c_make_scanner
except ImportError:  # a Python without the json module's C part: json.loads everywhere
    c_make_scanner = None

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).resolve().parent / "sql"
_NAME_RE = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


class DatabaseUnavailable(Exception):
    """PostgreSQL cannot be reached; the message names the host, never a password."""


#: SQLSTATEs of a database that cannot take this work *now*, whatever the work: read-only (a
#: failover to a standby, ``default_transaction_read_only``), shutting down or starting up, a lock
#: or statement timeout, a serialization failure or a deadlock, too many connections, out of disk
#: or memory.  Retrying the same request later can succeed; nothing is wrong with the request.
UNAVAILABLE_SQLSTATES = frozenset({
    "25006",                                    # read_only_sql_transaction
    "40001", "40P01",                           # serialization_failure, deadlock_detected
    "55P03", "57014",                           # lock_not_available (lock_timeout), query_canceled
    "57P01", "57P02", "57P03", "57P04", "57P05",  # admin/crash shutdown, cannot_connect_now, ...
    "53000", "53100", "53200", "53300", "53400",  # insufficient resources: disk, memory, connections
    "08000", "08003", "08006", "08001", "08004",  # connection exceptions
    "58030",                                    # io_error
})


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot take work now (503 and Retry-After on the web, a
    back-off in the worker), rather than that this request or statement is wrong.

    The one classification for web and worker: every psycopg ``OperationalError`` (connection
    lost, pool timeout) plus the SQLSTATEs of :data:`UNAVAILABLE_SQLSTATES`, whatever psycopg
    class they map to (a read-only transaction is an ``InternalError``)."""
    if isinstance(exc, psycopg.OperationalError):
        return True
    return isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) in UNAVAILABLE_SQLSTATES


def _compact(sql: str) -> str:
    """``sql`` without whole-line comments and indentation, as it is sent.

    psycopg converts a query's ``%(name)s`` placeholders once per distinct
    text and caches the result only for texts of at most 4,096 bytes
    (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``): the commented claim,
    over that limit, was converted again on every claim, a visible share of the
    worker's claim time.  A query that may hold a string spanning lines (an odd number
    of quotes on a line, or dollar quoting) is kept as written.
    """
    lines = [line.strip() for line in sql.splitlines()]
    code = [line for line in lines if line and not line.startswith("--")]
    if "$$" in sql or any(line.count("'") % 2 for line in code):
        return sql
    return "\n".join(_tight(line) for line in code)


_ESCAPE_STRING = re.compile(r"(?<![\w'])[eE]'")
#: ``=``, ``<>``, ``<=`` or ``>=`` between spaces, where neither neighbour could join
#: it into another operator (a ``%(name)s`` placeholder is sent as ``$n``).
_SPACED_OPERATOR = re.compile(r"(?<![-+*/<>=~!@#%^&|`?]) (=|<>|<=|>=) (?![-+*/<>=~!@#^&|`?]|%[^(])")


def _tight(line: str) -> str:
    """``line`` without the spaces after commas and around ``=``, outside string
    literals (the claim is kept under the cache's 4,096 bytes this way).  A line
    with an identifier or string that could hold them quoted otherwise
    (``"..."``, ``E'...'``) is kept as it is."""
    if '"' in line or _ESCAPE_STRING.search(line):
        return line
    parts = line.split("'")
    # Even parts are outside quotes (a doubled quote inside a literal splits off an empty part).
    for i in range(0, len(parts), 2):
        parts[i] = _SPACED_OPERATOR.sub(r"\1", parts[i].replace(", ", ","))
    return "'".join(parts)


def load_queries(directory: Path = SQL_DIR) -> dict[str, str]:
    """Parse every ``*.sql`` file of ``directory`` into ``{name: sql}``.

    A duplicated name is an error: two blocks must never silently shadow each other.
    """
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        matches = list(_NAME_RE.finditer(text))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            body = text[m.end():end].strip()
            # Drop the description comment lines that follow the name.
            lines = body.splitlines()
            while lines and lines[0].lstrip().startswith("--"):
                lines.pop(0)
            sql = _compact("\n".join(lines).strip().rstrip(";").strip())
            name = m.group(1)
            if name in found:
                raise ValueError(f"query {name!r} is defined twice ({path.name})")
            if not sql:
                raise ValueError(f"query {name!r} in {path.name} is empty")
            found[name] = sql
    return found


queries: dict[str, str] = load_queries()


def execute(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor:
    """Run the named query and return its cursor."""
    return conn.execute(queries[name], params or {})


def one(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> dict | None:
    """Run the named query and return its first row (or ``None``)."""
    return conn.execute(queries[name], params or {}).fetchone()


def all_rows(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None, *,
             hot: bool = False) -> list[dict]:
    """Run the named query and return every row.

    ``hot``: a statement a loop runs over and over (the worker's claim and outcomes): prepared on
    the server at its first run (see :func:`prepare_now`), not after psycopg's five.
    """
    return conn.execute(queries[name], params or {}, prepare=prepare_now(conn) if hot else None).fetchall()


def prepare_now(conn: psycopg.Connection) -> bool | None:
    """``prepare=`` for a hot statement on ``conn``: ``True`` (prepare at once) where statements are
    prepared at all, ``None`` (the connection's own rule: never, behind a transaction pooler, see
    :func:`connection_kwargs`) elsewhere.  Each unprepared run of the claim is parsed and planned
    again, and planning is a large share of the claim's server CPU (profile of
    `opsboard bench --scenario process_2`)."""
    return True if conn.prepare_threshold is not None else None


def now(conn: psycopg.Connection, at=None):
    """The database's clock, or ``at`` when a test injects one."""
    return conn.execute(queries["clock_now"], {"now": at}).fetchone()["now"]


def describe_target(url: str) -> str:
    """``host:port/dbname`` of a connection string, without user or password."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unparsable DATABASE_URL"
    host = info.get("host") or "localhost"
    if host.startswith("/"):
        target = f"socket {host}"
    else:
        target = f"{host}:{info.get('port') or 5432}"
    return f"{target}/{info.get('dbname') or info.get('user') or ''}"


#: Session settings for every connection opsboard opens.  JIT is off: the
#: queue's statements are short OLTP queries whose cost estimates can cross
#: the JIT threshold, and compiling them takes far longer than running them.
SESSION_SETTINGS = {"jit": "off"}
#: :data:`SESSION_SETTINGS` as they travel on a direct connection: in the startup packet.
SESSION_OPTIONS = " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())
#: ``OPSBOARD_DATABASE_POOLER`` value of a transaction pooler (PgBouncer's ``pool_mode = transaction``).
TRANSACTION_POOLER = "transaction"


#: Statements PostgreSQL runs only outside a transaction block: sent as they are (no scope to carry).
_OUTSIDE_TRANSACTIONS = re.compile(
    r"\s*(VACUUM|CHECKPOINT|CREATE\s+DATABASE|DROP\s+DATABASE|ALTER\s+SYSTEM|(CREATE|DROP)(\s+UNIQUE)?\s+INDEX\s+CONCURRENTLY"
    r"|REINDEX\b.*\bCONCURRENTLY|LISTEN|UNLISTEN)\b", re.I | re.S)


def _outside_transactions(query, conn) -> bool:
    if query is None:
        return False
    if not isinstance(query, str):
        try:
            query = query.decode() if isinstance(query, bytes) else query.as_string(conn)
        except Exception:
            return False
    return _OUTSIDE_TRANSACTIONS.match(query) is not None


class ScopedCursor(psycopg.Cursor):
    """A cursor whose statements, outside a transaction, run in one that carries the tenant scope
    (see :class:`BoundedConnection`)."""

    def execute(self, query, params=None, **kwargs):
        conn = self.connection
        if isinstance(conn, BoundedConnection) and conn._needs_scoped_transaction(query):
            return conn._in_scoped_transaction(lambda: super(ScopedCursor, self).execute(query, params, **kwargs))
        return super().execute(query, params, **kwargs)

    def executemany(self, query, params_seq, **kwargs):
        conn = self.connection
        if isinstance(conn, BoundedConnection) and conn._needs_scoped_transaction():
            return conn._in_scoped_transaction(
                lambda: super(ScopedCursor, self).executemany(query, params_seq, **kwargs))
        return super().executemany(query, params_seq, **kwargs)


class BoundedConnection(psycopg.Connection):
    """A connection whose every transaction carries the tenant scope and bounds (``lock_timeout``,
    ``statement_timeout``).

    Both are set by the transaction's first statement with ``set_config(..., true)`` (``SET
    LOCAL``): they end with the transaction, so they hold behind a transaction pooler (PgBouncer in
    ``pool_mode = transaction``, where a session setting would land on a server connection another
    client gets next) and never leak to another user of the connection.  Only the outermost block
    sets them (a savepoint inherits them).  In pipeline mode the statement travels with ``BEGIN`` and
    the work's first statement: no round trip of its own (the API's hot path, ``respond``).

    The tenant scope is :func:`opsboard.tenancy.current` when the transaction begins: the
    row-level-security policies read it (migration 0085).  A statement run outside a transaction
    carries it too: through the connection's session on a direct connection, else in a transaction
    of its own (see :attr:`_session_scope`).

    A subclass per pool holds that pool's bounds (:func:`bounded_connection_class`).
    """

    bounds_sql: str = "SELECT "
    _bounded_depth = 0
    #: The scope this connection's session holds (``set_config(..., false)``; empty at connect).  A
    #: direct connection (not behind a transaction pooler: statements are prepared) takes the scope of
    #: a lone statement into its session when it differs, one statement, and needs nothing more while
    #: its scope stays the same (a worker's claim and outcomes: every tenant, all day long; a web
    #: thread: one request's scope).  Behind a transaction pooler the session is not this
    #: connection's own, so a lone statement is wrapped in a transaction that sets the scope.
    _session_scope = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cursor_factory = ScopedCursor

    def _needs_scoped_transaction(self, query=None) -> bool:
        """Whether a lone statement must run in a transaction of its own to carry the scope (after
        taking the scope into this connection's session instead, where that is safe)."""
        if not (self._bounded_depth == 0 and self.autocommit and self._pipeline is None
                and self.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE):
            return False
        scope = tenancy.current()
        if scope == self._session_scope or _outside_transactions(query, self):
            return False
        return not self._take_session_scope(scope)

    def _take_session_scope(self, scope: str) -> bool:
        """Set ``scope`` on this connection's session if it is a direct one (its session is its own:
        statements are prepared, no transaction pooler); whether it did.  Outside a transaction only
        (queued with the next statements in pipeline mode)."""
        if self.prepare_threshold is None:
            return False
        before, self._session_scope = self._session_scope, scope  # first: the statement below comes back here
        try:
            psycopg.Connection.execute(self, "SELECT set_config('opsboard.tenant_scope', %s, false)", (scope,))
        except BaseException:
            self._session_scope = before
            raise
        return True

    @contextmanager
    def transaction(self, savepoint_name: str | None = None, force_rollback: bool = False):
        if (self._bounded_depth == 0 and self.autocommit
                and self.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE):
            scope = tenancy.current()
            if scope != self._session_scope:
                self._take_session_scope(scope)  # then no statement per transaction while the scope stays
        with super().transaction(savepoint_name, force_rollback) as tx:
            self._bounded_depth += 1
            try:
                if self._bounded_depth == 1:
                    scope = tenancy.current()
                    if scope != self._session_scope:
                        super().execute(self.bounds_sql + "set_config('opsboard.tenant_scope', %s, true)", (scope,))
                    elif self.bounds_sql != "SELECT ":
                        super().execute(self.bounds_sql.rstrip(", "))
                yield tx
            finally:
                self._bounded_depth -= 1

    def _scope_sql(self, scope: str) -> tuple[str, tuple]:
        return "SELECT set_config('opsboard.tenant_scope', %s, true)", (scope,)

    def _in_scoped_transaction(self, run):
        """``run()`` (one statement) in a transaction of its own that carries the scope: BEGIN, the
        scope, the statement and COMMIT in one round trip (pipeline mode), as one autocommit
        statement took.  A failure rolls the transaction back and raises."""
        if not psycopg.Pipeline.is_supported():
            with self.transaction():
                return run()
        try:
            with self.pipeline():
                super().execute("BEGIN")
                super().execute(*self._scope_sql(tenancy.current()))
                cur = run()
                super().execute("COMMIT")
        except BaseException:
            if not self.closed and self.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.rollback()
            raise
        return cur

    def execute(self, query, params=None, *, prepare=None, binary=False):
        if query == "BEGIN" and self._bounded_depth == 0:
            # An explicit BEGIN (the claim's and the relay's pipelined transactions) carries the scope:
            # in the session before it, or right after it (same round trip when pipelined).
            scope = tenancy.current()
            if scope != self._session_scope and not (
                    self.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
                    and self._take_session_scope(scope)):
                cur = super().execute(query, params, prepare=prepare, binary=binary)
                super().execute(*self._scope_sql(scope))
                return cur
            return super().execute(query, params, prepare=prepare, binary=binary)
        if self._needs_scoped_transaction(query):
            return self._in_scoped_transaction(
                lambda: super(BoundedConnection, self).execute(query, params, prepare=prepare, binary=binary))
        return super().execute(query, params, prepare=prepare, binary=binary)


def bounded_connection_class(bounds: Mapping[str, str]) -> type[BoundedConnection]:
    """A :class:`BoundedConnection` class whose transactions set ``bounds`` (setting name -> value)."""
    for name, value in bounds.items():  # written into the statement: names and durations only
        if not re.fullmatch(r"[a-z_]+", name) or not re.fullmatch(r"[0-9]+(ms|s|min)?", str(value)):
            raise ValueError(f"not a setting and a duration: {name!r} = {value!r}")
    sql = "SELECT " + "".join(f"set_config('{name}', '{value}', true), " for name, value in bounds.items())
    return type("BoundedConnection", (BoundedConnection,), {"bounds_sql": sql})


def connection_kwargs(pooler: str = "none") -> dict:
    """What opsboard passes to psycopg for a connection on ``DATABASE_URL``.

    Direct (``none``): :data:`SESSION_SETTINGS` in the startup packet, and
    psycopg prepares a statement on the server after it ran a few times.
    Through a transaction pooler neither holds: PgBouncer 1.18 refuses the
    ``options`` startup parameter (or drops it with ``ignore_startup_parameters``),
    and each transaction may run on another server connection, where a
    statement prepared on the previous one does not exist (``prepared statement
    "_pg3_0" does not exist`` / ``already exists``).  So nothing is prepared
    (``prepare_threshold=None``) and the settings come from the role
    (``ALTER ROLE ... SET``, printed by ``opsboard migrate --print-roles-sql``)
    or, per transaction, from ``SET LOCAL`` (:func:`set_local`).
    """
    if pooler == TRANSACTION_POOLER:
        return {"prepare_threshold": None}
    return {"options": SESSION_OPTIONS}


def set_local(conn: psycopg.Connection, **settings: str) -> None:
    """Settings for the rest of the current transaction only (``SET LOCAL``): what a
    transaction pooler keeps, and what can never leak to the next user of a server connection."""
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, true)", (name, str(value)))


def connect(url: str, *, pooler: str = "none", **kwargs) -> psycopg.Connection:
    """One autocommit connection with dict rows; a clear error when unreachable.

    ``pooler`` says what ``url`` goes through (see :func:`connection_kwargs`);
    session-bound work (LISTEN, advisory locks, migrations) uses a direct URL.
    """
    kwargs = {**connection_kwargs(pooler), **kwargs}
    kwargs.setdefault("connect_timeout", 5)
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # libpq's parse error quotes the whole string, password included: say less.
        raise DatabaseUnavailable("DATABASE_URL is not a valid PostgreSQL connection string "
                                  "(postgresql://user@host:port/dbname)") from None
    try:
        return BoundedConnection.connect(url, autocommit=True, row_factory=dict_row, **kwargs)
    except psycopg.Error as exc:
        reason = connect_failure_reason(exc)
        if "unsupported startup parameter" in reason:
            reason += (" (a transaction pooler such as PgBouncer: set OPSBOARD_DATABASE_POOLER=transaction "
                       "and OPSBOARD_DIRECT_DATABASE_URL; see docs/operations.md)")
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {describe_target(url)}: {reason}") from None


_FAILED_RE = re.compile(r'.*failed:\s*(?:FATAL:\s*)?(.+)$')


def connect_failure_reason(exc: BaseException) -> str:
    """The useful part of libpq's connection error ("Connection refused",
    "database \"x\" does not exist"), on one line, without the host preamble."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        m = _FAILED_RE.search(line)
        if m:
            return m.group(1).strip()
    return lines[0] if lines else type(exc).__name__


def start_embedded(pgdata: Path) -> str:
    """Start (or reuse) an embedded PostgreSQL in ``pgdata`` and return its URL.

    The server keeps its data in ``pgdata`` and is reused on the next start.
    pgserver stops it when the last process that asked for it exits.
    """
    import warnings

    with warnings.catch_warnings():
        # platformdirs warns about XDG_RUNTIME_DIR on servers; irrelevant here.
        warnings.simplefilter("ignore")
        import pgserver  # imported lazily: only the embedded mode needs it

    pgdata = Path(pgdata)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")
    except Exception as exc:  # pgserver raises plain exceptions with long logs
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL in {pgdata}: {first}") from None
    # Keep a reference so the server is not collected while this process runs.
    _embedded_servers.append(server)
    return server.get_uri()


_embedded_servers: list[Any] = []


def resolve_url(config) -> str:
    """The configured ``DATABASE_URL``, else an embedded server's URL."""
    if config.database_url:
        return config.database_url
    return start_embedded(config.pgdata)


def resolve_direct_url(config) -> str:
    """Where session-bound work connects: ``OPSBOARD_DIRECT_DATABASE_URL``, else :func:`resolve_url`.

    LISTEN (a notification reaches the session that listens), the leader's
    session advisory lock, the migration lock and the CLI's single
    connections need one server session for as long as they run: through a
    transaction pooler the next transaction may run on another server
    connection, and a notification or a lock would be lost or left behind.
    """
    return config.direct_database_url or resolve_url(config)


def session_settings_warning(conn: psycopg.Connection, pooler: str = "none") -> str | None:
    """One line when :data:`SESSION_SETTINGS` are not in force on ``conn`` (a pooled
    connection, as the app uses them), else ``None``.

    The check asks the server what it runs with (``current_setting``), so it
    sees what any pooler did: PgBouncer with ``ignore_startup_parameters =
    options`` accepts the connection and silently drops the settings.
    """
    names = list(SESSION_SETTINGS)
    row = conn.execute("SELECT " + ", ".join(f"current_setting(%s) AS s{i}" for i in range(len(names))),
                       names).fetchone()
    got = {name: row[f"s{i}"] for i, name in enumerate(names)}
    off = ", ".join(f"{n}={got[n]} (wanted {v})" for n, v in SESSION_SETTINGS.items() if got[n] != v)
    if not off:
        return None
    want = ", ".join(f"{n} = {v}" for n, v in SESSION_SETTINGS.items())
    if pooler == TRANSACTION_POOLER:
        return (f"session settings not in force through the transaction pooler: {off}; "
                f"set them on the role: ALTER ROLE <app role> SET {want} (docs/operations.md)")
    return (f"session settings sent at connect are not in force: {off}; something between opsboard and "
            f"PostgreSQL drops them (a pooler with ignore_startup_parameters = options?): set "
            f"OPSBOARD_DATABASE_POOLER=transaction, OPSBOARD_DIRECT_DATABASE_URL and ALTER ROLE <app role> SET {want} "
            f"(docs/operations.md)")


def check_app_role(conn: psycopg.Connection, mode: str, who: str) -> str | None:
    """Refuse (production) or warn (other modes) when ``conn``'s role is a superuser or has
    BYPASSRLS: row-level security (migration 0085) would not hold the web or the worker.  Returns
    the warning logged, if any."""
    from .config import ConfigError

    row = conn.execute("SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
                       ).fetchone()
    if row is None or not (row["rolsuper"] or row["rolbypassrls"]):
        return None
    what = "a superuser" if row["rolsuper"] else "a role with BYPASSRLS"
    message = (f"{who} connects as {row['rolname']}, {what}: the database's row-level security does not hold it; "
               f"connect as the application role (opsboard migrate --print-roles-sql, docs/operations.md)")
    if mode == "production":
        raise ConfigError(message)
    log.warning("%s (allowed in %s mode only)", message, mode)
    return message


def announce_route(conn: psycopg.Connection, pooler: str, direct_url: str, who: str) -> str | None:
    """Log at start-up how this process reaches PostgreSQL; returns the warning logged, if any.

    One warning when the session settings are not in force (see
    :func:`session_settings_warning`); behind a declared transaction pooler,
    one line saying where the session-bound work goes.
    """
    warning = session_settings_warning(conn, pooler)
    if warning:
        log.warning("%s: %s", who, warning)
    elif pooler == TRANSACTION_POOLER:
        log.info("%s: DATABASE_URL goes through a transaction pooler (no server-side prepared statements, "
                 "settings per role and SET LOCAL); LISTEN and the leader's lock use %s", who,
                 describe_target(direct_url))
    return warning


#: Seconds a pool keeps retrying one lost connection before it gives up (and
#: grows again at the next request).  psycopg_pool's own default (300 s, with
#: delays doubling from 1 s) leaves a pool idle for up to half a minute after
#: the database is back; capped here, a request never waits more than about a
#: second for the next attempt.
RECONNECT_TIMEOUT = 2.0


def make_pool(url: str, *, min_size: int, max_size: int, name: str, timeout: float = 10.0,
              open: bool = False, pooler: str = "none", bounds: Mapping[str, str] | None = None,
              **kwargs) -> ConnectionPool:
    """The one way opsboard builds a connection pool: autocommit connections
    with dict rows and :func:`connection_kwargs` for ``pooler`` (``kwargs`` go
    to the pool, e.g. ``reconnect_timeout`` or ``configure``).

    ``bounds`` (e.g. ``{"lock_timeout": "2000ms", "statement_timeout": "10000ms"}``, the web's) are
    set by every transaction (:class:`BoundedConnection`) and, on a direct connection, in the
    startup packet too, which bounds the statements run outside a transaction at no cost.  Behind
    a transaction pooler those statements take the role's settings (``ALTER ROLE ... SET``)."""
    kwargs.setdefault("reconnect_timeout", RECONNECT_TIMEOUT)
    conn_kwargs = connection_kwargs(pooler)
    kwargs.setdefault("connection_class", bounded_connection_class(bounds or {}))
    if bounds:
        if "options" in conn_kwargs:
            conn_kwargs["options"] += "".join(f" -c {n}={v}" for n, v in bounds.items())
    return ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "row_factory": dict_row, **conn_kwargs},
        open=open,
        name=name,
        timeout=timeout,
        **kwargs,
    )


def _jsonb_text(text: str):
    """Parse jsonb's text form with the json module's C scanner, without json.loads' Python layers
    (encoding detection, whitespace matching): jsonb_out never writes whitespace around the value;
    anything else (never expected) goes through json.loads."""
    try:
        value, end = _JSON_SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


_JSON_SCAN = c_make_scanner(json.JSONDecoder()) if c_make_scanner is not None else None


class _FastJsonbBinaryLoader(JsonbBinaryLoader):
    def load(self, data):
        if data and data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format: {data[0]}")
        return _jsonb_text(bytes(data[1:]).decode())


class _FastJsonbLoader(JsonbLoader):
    def load(self, data):
        return _jsonb_text(bytes(data).decode())


def fast_jsonb(conn: psycopg.Connection) -> None:
    """Load jsonb on ``conn`` through :func:`_jsonb_text`: the same values as json.loads (the same
    scanner), for a fraction of the time on a small payload (a worker loads one per claimed
    job).  A pool's ``configure`` (the worker's own pool)."""
    if _JSON_SCAN is None:
        return
    conn.adapters.register_loader("jsonb", _FastJsonbBinaryLoader)
    conn.adapters.register_loader("jsonb", _FastJsonbLoader)


class KeptConnection:
    """One connection of ``pool`` kept across the statements of one busy loop (one thread).

    psycopg_pool hands out its connections first in, first out: a loop that took one per
    statement ran on every connection of the pool in turn, and each of them prepared and planned
    the loop's statements for itself (a worker's claim was planned again on each connection of
    its pool).  :meth:`connection` gives the kept one (taking one from the pool first);
    a block that raises gives it back (the pool rolls it back, or replaces it when broken), so
    the next block takes another; :meth:`release` gives it back when the loop goes idle.
    """

    def __init__(self, pool: ConnectionPool):
        self.pool = pool
        self._conn: psycopg.Connection | None = None

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        conn = self._conn
        if conn is None:
            conn = self._conn = self.pool.getconn(timeout)
        try:
            yield conn
        except BaseException:
            self.release()
            raise
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.release()

    def release(self) -> None:
        """Give the connection back to the pool (no-op when none is kept)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self.pool.putconn(conn)


class Database:
    """A connection pool over one PostgreSQL database."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10, name: str = "opsboard",
                 pooler: str = "none", **pool_kwargs):
        self.url = url
        self.pooler = pooler
        self.pool = make_pool(url, min_size=min_size, max_size=max_size, name=name, timeout=10, pooler=pooler,
                              **pool_kwargs)

    def open(self, check: bool = True) -> "Database":
        """Open the pool; with ``check``, fail fast and clearly when unreachable."""
        if check:
            connect(self.url, pooler=self.pooler).close()
        self.pool.open(wait=False)
        return self

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection."""
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A pooled connection inside one transaction, committed on success."""
        with self.pool.connection() as conn:
            with conn.transaction():
                yield conn
