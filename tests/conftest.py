"""Test fixtures: a real PostgreSQL, a template database built once per run.

Which server: ``OPSBOARD_TEST_DATABASE_URL``, else ``DATABASE_URL``, else an
embedded server (pgserver) in a temporary folder.  The template database is
migrated once; ``conn`` gives a transaction rolled back after the test, and
``db_url`` a fresh clone (``CREATE DATABASE ... TEMPLATE``) for tests that
commit across connections (NOTIFY, workers, the web app).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from opsboard import auth
from opsboard.config import Config, ROOT
from opsboard.db import SESSION_OPTIONS
from opsboard.migrate import migrate

from hypothesis import settings as _hypothesis_settings

from opsboard.catalogue import activate
from opsboard.features import build_catalogue

# No per-example deadline: a property holds or not whatever the machine's load (hypothesis's 200 ms
# deadline failed a pure-Python property on a 2-core machine running several suites at once).
_hypothesis_settings.register_profile("opsboard", deadline=None)
_hypothesis_settings.load_profile("opsboard")
from opsboard.tools import demo_domain

#: The extension modules of the test processes: the tests' own job types and the demo plug-in
#: (its events and policies are the outbox's and notifications' test domain).
TEST_MODULES = ("tests.support.jobs", "tests.support.limits", "tests.support.broadcast", "tests.support.workflow_jobs",
                "opsboard.tools.demo_catalogue")
#: The catalogue of this test process (worker subprocesses build theirs from OPSBOARD_JOB_MODULES).
CATALOGUE = build_catalogue(modules=TEST_MODULES)
activate(CATALOGUE)


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="bigger chaos runs (tests/chaos): 4x the duration and volume, a provider down a minute")


@pytest.fixture(autouse=True)
def _test_catalogue():
    """Each test starts with the tests' catalogue active (an app built by a test activates its own),
    its derived tables computed afresh (a test may have monkeypatched a section's dict)."""
    activate(CATALOGUE)
    CATALOGUE.changed()
    yield
    CATALOGUE.changed()

_RUN = uuid.uuid4().hex[:8]
TEMPLATE_DB = f"opsboard_tpl_{_RUN}"


def _server_url(tmp_root: Path) -> str:
    url = os.environ.get("OPSBOARD_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        return url
    import pgserver
    server = pgserver.get_server(str(tmp_root / "pgdata"), cleanup_mode="stop")
    _keep.append(server)
    return server.get_uri()


_keep: list = []


def apply_demo_schema(url: str) -> None:
    """Create the demo plug-in's tables (``opsboard/tools/demo_schema.sql``) on a migrated database,
    as ``opsboard demo`` does: the product's migrations have none."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as c:
        demo_domain.apply_schema(c)


#: The roles the tests' web apps and workers run as (``opsboard migrate --print-roles-sql``): neither
#: superuser nor BYPASSRLS, so the row-level-security policies are in force in CI too.  The seeding
#: and the assertions of the tests connect as the server's own (super)user.
OWNER_ROLE, APP_ROLE = "opsboard_test_owner", "opsboard_test_app"


def make_app_roles(url: str) -> None:
    """Create the roles (once per server; several test runs may race) and hand the template's objects
    to them (its clones inherit that)."""
    from opsboard.migrate import ensure_roles
    ensure_roles(url, OWNER_ROLE, APP_ROLE, grant_creator=True)


def app_url(url: str) -> str:
    """``url`` as the application role: what the tests' web apps and workers connect as.  A database
    not cloned from the template (a cluster of a test's own, a restored backup) gets the roles first."""
    try:
        with _admin(url) as c:
            ready = c.execute("SELECT has_table_privilege(%s, 'jobs', 'SELECT')", (APP_ROLE,)).fetchone()[0]
    except psycopg.Error:  # no such role on this server, or no jobs table yet: leave it to the caller
        ready = None
    if ready is False or (ready is None and _has_jobs(url)):
        make_app_roles(url)
    return make_conninfo(url, user=APP_ROLE)


def _has_jobs(url: str) -> bool:
    try:
        with _admin(url) as c:
            return c.execute("SELECT to_regclass('jobs') IS NOT NULL").fetchone()[0]
    except psycopg.Error:
        return False


def with_db(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def server_url(tmp_path_factory) -> str:
    return _server_url(tmp_path_factory.mktemp("pg"))


@pytest.fixture(scope="session")
def template_url(server_url):
    with _admin(server_url) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
        c.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    url = with_db(server_url, TEMPLATE_DB)
    migrate(url, log=lambda *_: None)
    apply_demo_schema(url)  # the demo plug-in's own tables: every clone has them
    make_app_roles(url)  # the web and the workers of the tests run as the app role (row-level security)
    yield url
    with _admin(server_url) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')


class Databases:
    """Creates clones of the template; drops them at the end."""

    def __init__(self, server_url: str):
        self.server_url = server_url
        self.created: list[str] = []

    def clone(self, template: str = TEMPLATE_DB) -> str:
        name = f"opsboard_t_{_RUN}_{len(self.created)}_{uuid.uuid4().hex[:6]}"
        with _admin(self.server_url) as c:
            c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.created.append(name)
        return with_db(self.server_url, name)

    def empty(self) -> str:
        name = f"opsboard_e_{_RUN}_{len(self.created)}_{uuid.uuid4().hex[:6]}"
        with _admin(self.server_url) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return with_db(self.server_url, name)

    def drop(self, url: str) -> None:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        with _admin(self.server_url) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def databases(server_url, template_url):
    dbs = Databases(server_url)
    yield dbs
    for name in dbs.created:
        try:
            with _admin(server_url) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error:
            pass


@pytest.fixture(scope="session")
def shared_url(databases):
    """One clone shared by the rolled-back-transaction tests."""
    return databases.clone()


@pytest.fixture
def conn(shared_url):
    """A connection inside a transaction that is rolled back after the test."""
    with psycopg.connect(shared_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as c:
        with c.transaction(force_rollback=True):
            yield c


@pytest.fixture
def db_url(databases):
    """A fresh database of its own, for tests that commit."""
    url = databases.clone()
    yield url
    databases.drop(url)


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS)


@pytest.fixture
def make_tenant():
    def make(conn, slug=None, **kw):
        return auth.ensure_tenant(conn, slug or f"t-{uuid.uuid4().hex[:8]}", **kw)
    return make


@pytest.fixture
def tenant(conn, make_tenant):
    """A fresh tenant inside the rolled-back transaction."""
    return make_tenant(conn)


@pytest.fixture
def t0(conn):
    """The database's clock at the start of the test, for injected-now queries."""
    return conn.execute("SELECT now() AS n").fetchone()["n"]


# ---------------------------------------------------------------- web

def make_config(**changes) -> Config:
    return Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_SECRET_KEY": "test-secret-" + "x" * 32,
                            "OPSBOARD_JOB_MODULES": ",".join(TEST_MODULES)}).replace(**changes)


@pytest.fixture
def app(db_url):
    from opsboard.web.app import create_app
    from opsboard.db import Database
    database = Database(app_url(db_url), min_size=1, max_size=4).open()
    application = create_app({"OPSBOARD": make_config(database_url=app_url(db_url)), "DATABASE": database, "TESTING": True,
                              "CATALOGUE": CATALOGUE})
    application.extensions["test_db_url"] = db_url
    yield application
    database.close()


@pytest.fixture
def client(app):
    return app.test_client()


_CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_from(client, path="/login") -> str:
    html = client.get(path).get_data(as_text=True)
    m = _CSRF_RE.search(html)
    assert m, f"no CSRF token on {path}"
    return m.group(1)


@pytest.fixture
def login_as(app, client):
    """``login_as("ops")`` creates a user with that role (operator tenant by default) and signs in."""
    def login(role: str, *, tenant: str = "operator", operator: bool = True, email: str | None = None):
        email = email or f"{role}-{uuid.uuid4().hex[:6]}@example.test"
        with connect(app.extensions["test_db_url"]) as c:
            auth.ensure_tenant(c, tenant, is_operator=operator)
            auth.create_user(c, email, "correct horse battery", role, tenant)
        token = csrf_from(client)
        r = client.post("/login", data={"email": email, "password": "correct horse battery", "csrf_token": token})
        assert r.status_code == 302, r.get_data(as_text=True)
        client.csrf = _session_csrf(client)
        return email
    return login


def _session_csrf(client) -> str:
    with client.session_transaction() as s:
        if "_csrf" not in s:
            s["_csrf"] = uuid.uuid4().hex
        return s["_csrf"]


# ---------------------------------------------------------------- processes

def worker_env(db_url: str, **extra) -> dict:
    env = dict(os.environ)
    env.update({"DATABASE_URL": app_url(db_url), "OPSBOARD_ENV": "test", "OPSBOARD_JOB_MODULES": ",".join(TEST_MODULES),
                "OPSBOARD_LOG_FORMAT": "text", "PYTHONPATH": str(ROOT)})
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def start_worker(tmp_path):
    """Start ``python -m worker`` subprocesses; stopped (SIGKILL if needed) after the test."""
    procs = []

    def start(db_url: str, *args: str, **env) -> subprocess.Popen:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", "worker", *args], cwd=ROOT, env=worker_env(db_url, **env),
                             stdout=log, stderr=subprocess.STDOUT)
        p.log_path = tmp_path / f"worker-{len(procs)}.log"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)


def wait_for(condition, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"):
    """Poll ``condition`` until truthy (a real subprocess must act); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")
