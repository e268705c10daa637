"""The ``opsboard`` command and the WSGI entry point, run as real subprocesses.

A mistake the operator can fix exits with status 2 and one line on stderr,
never a traceback.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from opsboard import auth
from opsboard.config import ROOT, resource_dir
from opsboard.migrate import MIGRATE_LOCK_KEY
from tests.conftest import app_url, connect, wait_for
from tests.integration.test_migrate import lock_waiters

MIGRATIONS_DIR = resource_dir("migrations")
MIGRATION_COUNT = len(list(MIGRATIONS_DIR.glob("*.sql")))
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"


def cli_env(db_url: str | None = UNREACHABLE, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSBOARD_") and k != "DATABASE_URL"}
    env.update({"OPSBOARD_ENV": "test", "PYTHONPATH": str(ROOT)})
    if db_url:
        env["DATABASE_URL"] = db_url
    env.update(extra)
    return env


def run(*args: str, env: dict | None = None, stdin: str | None = None, timeout: float = 60,
        command=(sys.executable, "-m", "opsboard.cli")) -> subprocess.CompletedProcess:
    return subprocess.run([*command, *args], cwd=ROOT, env=env or cli_env(), input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def empty_url(databases):
    url = databases.empty()
    yield url
    databases.drop(url)


# ---------------------------------------------------------------- usage errors

@pytest.mark.parametrize("args, fragment", [
    ((), "the following arguments are required: command"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    (("createuser", "--email", "a@example.test"), "the following arguments are required: --role, --tenant"),
    (("createuser", "--email", "a@b.test", "--role", "root", "--tenant", "acme"), "invalid choice: 'root'"),
    (("web", "--port", "eighty"), "invalid int value: 'eighty'"),
    (("migrate", "--force"), "unrecognized arguments: --force"),
])
def test_usage_errors_exit_2_with_one_line(args, fragment):
    assert_one_line_error(run(*args), fragment)


@pytest.mark.parametrize("name, value, fragment", [
    ("OPSBOARD_LEASE_SECONDS", "abc", "OPSBOARD_LEASE_SECONDS='abc' is not a whole number"),
    ("OPSBOARD_WORKER_QUEUES", "foo=1", "queue slots: 'foo=1'"),
    ("OPSBOARD_ENV", "staging", "OPSBOARD_ENV='staging'"),
    ("OPSBOARD_POOL_MIN", "50", "OPSBOARD_POOL_MIN=50 is larger than OPSBOARD_POOL_MAX=10"),
])
def test_bad_configuration_exits_2_with_one_line(name, value, fragment):
    line = assert_one_line_error(run("migrate", env=cli_env(**{name: value})), fragment)
    assert line.startswith("opsboard: ")


def test_bad_worker_queues_argument():
    assert_one_line_error(run("worker", "--queues", "default=0"), "default=0 must be between 1 and 1000")


def test_unreachable_database_names_the_target():
    result = run("migrate")
    line = assert_one_line_error(result, "127.0.0.1:1", "Connection refused")
    assert "password" not in line.lower()


def test_bench_lists_its_scenarios_and_refuses_an_unknown_one():
    result = run("bench", "--list")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("enqueue_single ") and "\nenqueue_many " in result.stdout
    assert_one_line_error(run("bench", "--scenario", "nosuch"), "unknown scenario nosuch; choose from enqueue_single")
    assert "\npinned_horizon " in result.stdout


def test_bench_refuses_a_pin_shorter_than_a_second():
    """issue 48: `--pin-seconds` of the pinned_horizon scenario is checked before any server is touched."""
    assert_one_line_error(run("bench", "--scenario", "pinned_horizon", "--pin-seconds", "0"),
                          "--pin-seconds must be at least 1")


def test_bench_without_the_bench_package_says_to_install_the_extra():
    """The CLI imports opsboard_bench only inside `opsboard bench`: without it, one line and exit 2."""
    hidden = ("import sys; sys.modules['opsboard_bench'] = sys.modules['opsboard_bench.cli'] = None; "
              "from opsboard.cli import main; sys.exit(main())")
    assert_one_line_error(run("bench", "--list", command=(sys.executable, "-c", hidden)),
                          "opsboard: the benchmarks are not installed", "install the bench extra",
                          "pip install 'opsboard[bench]'")


def test_password_is_never_printed():
    result = run("migrate", env=cli_env("postgresql://postgres:hunter2secret@127.0.0.1:1/x"))
    assert_one_line_error(result, "127.0.0.1:1")
    assert "hunter2secret" not in result.stderr + result.stdout


# ---------------------------------------------------------------- migrate

def test_migrate_a_fresh_database_then_nothing_to_do(empty_url):
    first = run("migrate", env=cli_env(empty_url))
    assert first.returncode == 0, first.stderr
    assert f"{MIGRATION_COUNT} migration(s) applied" in first.stdout
    assert "applied 0001_foundation.sql" in first.stdout
    second = run("migrate", env=cli_env(empty_url))
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "database is up to date"
    with connect(empty_url) as c:
        assert c.execute("SELECT count(*) AS n FROM schema_migrations").fetchone()["n"] == MIGRATION_COUNT


def test_concurrent_migrate_processes(empty_url):
    """Two ``opsboard migrate`` processes released at once: both succeed, one applies."""
    env = cli_env(empty_url)
    with connect(empty_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_KEY,))
        procs = [subprocess.Popen([sys.executable, "-m", "opsboard.cli", "migrate"], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            wait_for(lambda: lock_waiters(holder) == 2, timeout=30,
                     message="both processes to wait on the migration lock")
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
        outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    summaries = sorted(next(line for line in out.splitlines() if "migration(s) applied" in line or "up to date" in line)
                       for out, _ in outputs)
    assert summaries == [f"{MIGRATION_COUNT} migration(s) applied", "database is up to date"]
    # The shipped templates are published once, by whichever process comes first.
    published = [line for out, _ in outputs for line in out.splitlines() if "shipped template(s) published" in line]
    assert len(published) == 1 and int(published[0].split()[0]) > 0, outputs
    with connect(empty_url) as c:
        rows = c.execute("SELECT version, count(*) AS n FROM schema_migrations GROUP BY version").fetchall()
    assert len(rows) == MIGRATION_COUNT and all(r["n"] == 1 for r in rows)


# ---------------------------------------------------------------- createuser

def test_createuser_then_login(db_url):
    env = cli_env(db_url)
    result = run("createuser", "--email", "Ops@Example.test", "--role", "ops", "--tenant", "platform",
                 "--operator", "--password-stdin", env=env, stdin="a long enough password\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "user ops@example.test is ops in platform"
    with connect(db_url) as c:
        principal = auth.authenticate(c, "ops@example.test", "a long enough password", "127.0.0.1")
        assert principal is not None
        assert [(m.tenant_slug, m.role.value, m.is_operator) for m in principal.memberships] == [("platform", "ops", True)]
        assert auth.authenticate(c, "ops@example.test", "a long enough password\n", "127.0.0.1") is None
        row = c.execute("SELECT actor_label, after FROM audit_log WHERE action = 'user.create'").fetchone()
    assert row["actor_label"] == "cli"
    assert row["after"] == {"email": "ops@example.test", "role": "ops", "tenant": "platform"}
    assert "a long enough password" not in str(row)


def test_createuser_accepts_crlf_on_stdin(db_url):
    result = run("createuser", "--email", "w@example.test", "--role", "support_agent", "--tenant", "acme",
                 "--password-stdin", env=cli_env(db_url), stdin="windows-password\r\n")
    assert result.returncode == 0, result.stderr
    with connect(db_url) as c:
        assert auth.authenticate(c, "w@example.test", "windows-password", "127.0.0.1") is not None


@pytest.mark.parametrize("args, stdin, fragment", [
    (("--email", "x@example.test", "--role", "ops", "--tenant", "acme", "--password-stdin"), "short\n",
     "password must have at least 8 characters"),
    (("--email", "not-an-email", "--role", "ops", "--tenant", "acme", "--password-stdin"), "long enough pw\n",
     "is not an email address"),
    (("--email", "x@example.test", "--role", "ops", "--tenant", "Bad Slug!", "--password-stdin"), "long enough pw\n",
     "tenant slug 'Bad Slug!'"),
    (("--email", "x@example.test", "--role", "ops", "--tenant", "acme"), "",
     "use --password-stdin"),
])
def test_createuser_mistakes_exit_2(db_url, args, stdin, fragment):
    assert_one_line_error(run("createuser", *args, env=cli_env(db_url), stdin=stdin), fragment)
    with connect(db_url) as c:
        assert c.execute("SELECT count(*) AS n FROM users").fetchone()["n"] == 0


def test_createuser_on_an_unmigrated_database_says_so(empty_url):
    result = run("createuser", "--email", "x@example.test", "--role", "ops", "--tenant", "acme", "--password-stdin",
                 env=cli_env(empty_url), stdin="long enough pw\n")
    assert_one_line_error(result, "opsboard migrate")


def test_user_token_with_a_tenant_makes_a_member_customer_and_one_token(db_url):
    """One end-user token (inbox + customer tickets); there is no separate ticket token command."""
    env = cli_env(db_url)
    with connect(db_url) as c:
        auth.ensure_tenant(c, "acme")
    result = run("user-token", "--email", "Customer@Example.test", "--tenant", "acme", env=env)
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip().splitlines()[-1]
    assert secret.startswith("obu_")
    from opsboard.notifications import inbox
    from opsboard.tickets import service
    with connect(db_url) as c:
        found = inbox.verify_token(c, secret)
        assert found["email"] == "customer@example.test"
        assert service.customer_tenant(c, found["user_id"])["tenant_slug"] == "acme"
        roles = c.execute("SELECT m.role::text AS role FROM memberships m WHERE m.user_id = %s",
                          (found["user_id"],)).fetchall()
        assert [r["role"] for r in roles] == ["member"]
        assert secret not in str(c.execute("SELECT after FROM audit_log WHERE action = 'user_token.create'").fetchall())
    assert_one_line_error(run("user-token", "--email", "x@example.test", "--tenant", "nope", env=env),
                          "tenant 'nope' does not exist")
    assert_one_line_error(run("user-token", "--email", "nobody@example.test", env=env), "no user")
    assert_one_line_error(run("ticket-token", "--email", "x@example.test", "--tenant", "acme", env=env),
                          "invalid choice: 'ticket-token'")


def test_console_script_is_installed(empty_url):
    script = os.path.join(os.path.dirname(sys.executable), "opsboard")
    assert os.path.exists(script), "pip install -e . installs the opsboard console script beside python"
    result = run("migrate", env=cli_env(empty_url), command=(script,))
    assert result.returncode == 0, result.stderr
    assert f"{MIGRATION_COUNT} migration(s) applied" in result.stdout


# ---------------------------------------------------------------- web

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_web_without_opsboard_env_runs_in_development_mode(db_url, tmp_path):
    """``opsboard web`` promises development mode when OPSBOARD_ENV is unset."""
    env = cli_env(db_url)
    del env["OPSBOARD_ENV"]
    port = free_port()
    log = open(tmp_path / "web.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "opsboard.cli", "web", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"opsboard web exited {proc.returncode}: {(tmp_path / 'web.log').read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return json.load(r)
        except OSError:
            return None

    try:
        assert wait_for(ready, timeout=30, message="opsboard web to answer")["status"] == "ready"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


# ---------------------------------------------------------------- wsgi

def test_wsgi_in_production_without_secret_exits_2(db_url):
    result = run("-c", "import wsgi", command=(sys.executable,),
                 env=cli_env(db_url, OPSBOARD_ENV="production"))
    assert_one_line_error(result, "OPSBOARD_SECRET_KEY is not set")


def test_wsgi_in_production_with_short_secret_exits_2(db_url):
    result = run("-c", "import wsgi", command=(sys.executable,),
                 env=cli_env(db_url, OPSBOARD_ENV="production", OPSBOARD_SECRET_KEY="short"))
    assert_one_line_error(result, "OPSBOARD_SECRET_KEY is too short")


def test_wsgi_in_production_with_secret_builds_the_app(db_url):
    code = "import wsgi; print(sorted(wsgi.app.blueprints)); wsgi.app.extensions['opsboard_db'].close()"
    result = run("-c", code, command=(sys.executable,),
                 env=cli_env(app_url(db_url), OPSBOARD_ENV="production", OPSBOARD_SECRET_KEY="k" * 48))
    assert result.returncode == 0, result.stderr
    assert "'auth'" in result.stdout and "'health'" in result.stdout
