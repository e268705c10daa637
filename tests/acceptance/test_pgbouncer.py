"""Through PgBouncer in transaction mode (issue 29).

Debian's PgBouncer 1.18 (``/usr/sbin/pgbouncer``) is started on a free port in
front of the test database, with a server pool (6) smaller than the clients
(30 concurrent producers, 30 API clients, 30 dashboard clients, a real
``python -m worker`` and a gunicorn web app).  The product is told
``OPSBOARD_DATABASE_POOLER=transaction`` and given the direct URL for what is
bound to a session (LISTEN, the leader's lock).

What it shows: the session settings sent at connect are refused by the pooler
(and the error says what to set); through it, with the settings on the role,
nothing is lost, nothing runs twice, no prepared-statement error appears, a
``SET LOCAL statement_timeout`` is honoured inside a transaction and never
leaks to the next one, and the worker and web say at start-up where their
connections go.  ``.ci/run`` installs the package when it is missing; without
it the test skips and says so.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid

import psycopg
import pytest
import requests
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from opsboard import apikeys, audit, auth, db, jobqueue
from opsboard.config import ROOT
from opsboard.jobqueue import NewJob
from tests.acceptance.test_cli import free_port
from tests.conftest import APP_ROLE, connect, wait_for, worker_env

CLIENTS = 30
#: Server connections per (database, user): fewer than the clients.
POOL_SIZE = 6
JOBS_PER_CLIENT = 10
EVENTS_PER_CLIENT = 3
PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
EFFECTS = ("CREATE TABLE test_effects (job_id uuid, key text, worker text, attempt int, "
           "at timestamptz DEFAULT clock_timestamp())")
ORDER = {"type": "order.paid", "aggregate": {"type": "order", "id": "o-1"},
         "payload": {"order_id": "o-1", "amount_cents": 1250, "currency": "EUR"}}
PREPARED = re.compile(r"prepared statement .*(already exists|does not exist)")

pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed (Debian package pgbouncer; "
                                                          ".ci/run installs it with apt-get)")


class PgBouncer:
    """PgBouncer in transaction mode on a free port, in front of ``target`` (trust auth on loopback)."""

    def __init__(self, target: str):
        info = conninfo_to_dict(target)
        self.user = info.get("user") or "postgres"
        self.dbname = info["dbname"]
        self.port = free_port()
        # Its own folder under /tmp, readable by the unprivileged user it switches to when run as root.
        self.dir = tempfile.mkdtemp(prefix="opsboard-pgbouncer-")
        os.chmod(self.dir, 0o777)
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            # The server's user (the tests' seeding, the direct URL) and the application role the web
            # and the workers connect as (row-level security).
            f.write(f'"{self.user}" ""\n"{APP_ROLE}" ""\n')
        with open(ini, "w") as f:
            f.write(f"""[databases]
* = host={info.get('host') or '127.0.0.1'} port={info.get('port') or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/userlist.txt
admin_users = {self.user}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 500
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
""")
        for name in os.listdir(self.dir):
            os.chmod(os.path.join(self.dir, name), 0o644)
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []  # it refuses to run as root
        out = subprocess.run([PGBOUNCER, "-d", *as_user, ini], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr + self.log()
        self.url = make_conninfo(target, host="127.0.0.1", port=str(self.port))
        wait_for(self._answers, timeout=20, message="pgbouncer to accept connections")

    def _answers(self) -> bool:
        try:
            with self.admin() as c:
                return bool(c.execute("SHOW VERSION").fetchall())
        except psycopg.OperationalError:
            return False

    def admin(self) -> psycopg.Connection:
        """The admin console (simple query protocol only: a client-side cursor)."""
        return psycopg.connect(make_conninfo(self.url, dbname="pgbouncer"), autocommit=True,
                               cursor_factory=psycopg.ClientCursor, row_factory=dict_row)

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "pgbouncer.log")) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            with open(os.path.join(self.dir, "pgbouncer.pid")) as f:
                os.kill(int(f.read().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pgbouncer(db_url):
    bouncer = PgBouncer(db_url)
    yield bouncer
    bouncer.stop()


def pooled(url: str) -> psycopg.Connection:
    """A connection as the product makes one behind a transaction pooler."""
    return db.connect(url, pooler=db.TRANSACTION_POOLER)


def test_the_pooler_refuses_connect_time_settings_and_the_start_up_check_sees_them_missing(db_url, pgbouncer):
    # As opsboard connected before issue 29: the settings in the startup packet.
    with pytest.raises(db.DatabaseUnavailable, match="unsupported startup parameter: options.*"
                                                     "OPSBOARD_DATABASE_POOLER=transaction"):
        db.connect(pgbouncer.url)
    # Without them the pooler lets us in, and the check sees that jit is not off.
    with pooled(pgbouncer.url) as c:
        warning = db.session_settings_warning(c, db.TRANSACTION_POOLER)
    assert warning and "jit=on (wanted off)" in warning and "ALTER ROLE" in warning
    # On the role (here: in this database only), every new server session has them.
    with connect(db_url) as c:
        c.execute(f'ALTER ROLE "{pgbouncer.user}" IN DATABASE "{pgbouncer.dbname}" SET jit = off')
    with pgbouncer.admin() as a:
        a.execute("RECONNECT")  # the pooler's open server connections began before the ALTER ROLE
    with pooled(pgbouncer.url) as c:
        assert db.session_settings_warning(c, db.TRANSACTION_POOLER) is None


def test_queue_api_worker_and_dashboard_through_pgbouncer_with_30_clients(db_url, pgbouncer, start_worker, tmp_path):
    with connect(db_url) as c:
        # The deployment's one-time step (docs/operations.md): the session settings on the role.
        c.execute(f'ALTER ROLE "{pgbouncer.user}" IN DATABASE "{pgbouncer.dbname}" SET jit = off')
        c.execute(EFFECTS)
        tenant = auth.ensure_tenant(c, "acme")["id"]
        secret, _ = apikeys.create(c, tenant, "pooler", audit.Actor("test"))
        auth.ensure_tenant(c, "operator", is_operator=True)
        for i in range(CLIENTS):
            auth.create_user(c, f"ops{i}@example.test", "correct horse battery", "ops", "operator")
    pooler_env = {"OPSBOARD_DATABASE_POOLER": "transaction", "OPSBOARD_DIRECT_DATABASE_URL": db_url,
                  "OPSBOARD_POLL_INTERVAL": "0.2"}

    # The web app under gunicorn, its pool through the pooler.
    port = free_port()
    web_log = tmp_path / "gunicorn.log"
    env = worker_env(pgbouncer.url, **pooler_env, OPSBOARD_SECRET_KEY="x" * 40, OPSBOARD_POOL_MAX="8",
                     # 30 sign-ins from one address at once: not a password-guessing attack here.
                     OPSBOARD_LOGIN_MAX_FAILURES_ADDRESS="1000")
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "-w", "2", "--threads", "8",
                            "wsgi:app"], cwd=ROOT, env=env, stdout=open(web_log, "wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    worker = None
    try:
        def web_ready():
            assert web.poll() is None, web_log.read_text()
            try:
                return requests.get(f"{base}/readyz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_for(web_ready, timeout=60, message="gunicorn to answer")
        worker = start_worker(pgbouncer.url, "--queues", "default=8", "--id", "pooled", **pooler_env)

        errors: list[str] = []
        job_ids: list = []
        event_ids: list = []
        pages: list[int] = []
        lock = threading.Lock()
        start = threading.Barrier(CLIENTS * 3)

        def producer(i: int) -> None:
            # Enqueue one by one and in a batch, each in its own transaction: the same statements
            # again and again on one client, which psycopg would prepare after five runs.
            try:
                start.wait(60)
                with pooled(pgbouncer.url) as c:
                    ids = []
                    for k in range(JOBS_PER_CLIENT // 2):
                        with c.transaction():
                            ids.append(jobqueue.enqueue(c, "test.record", {"key": f"p{i}-{k}"}, tenant=tenant)["id"])
                    with c.transaction():
                        ids += jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"p{i}-{k}"}, tenant)
                                                         for k in range(JOBS_PER_CLIENT // 2, JOBS_PER_CLIENT)])
                    # A timeout for one transaction: honoured there, gone after it.
                    with pytest.raises(psycopg.errors.QueryCanceled):
                        with c.transaction():
                            db.set_local(c, statement_timeout="100ms")
                            c.execute("SELECT pg_sleep(5)")
                    assert c.execute("SELECT current_setting('statement_timeout') AS s").fetchone()["s"] == "0"
                with lock:
                    job_ids.extend(ids)
            except Exception as exc:  # collected: the main thread asserts
                with lock:
                    errors.append(f"producer {i}: {type(exc).__name__}: {exc}")

        def api_client(i: int) -> None:
            try:
                start.wait(60)
                with requests.Session() as s:
                    for k in range(EVENTS_PER_CLIENT):
                        r = s.post(f"{base}/api/v1/events", json={**ORDER, "aggregate": {"type": "order",
                                                                                           "id": f"o-{i}-{k}"}},
                                   headers={"Authorization": f"Bearer {secret}"}, timeout=30)
                        assert r.status_code == 202, (r.status_code, r.text[:300])
                        with lock:
                            event_ids.append(r.json()["id"])
            except Exception as exc:
                with lock:
                    errors.append(f"api client {i}: {type(exc).__name__}: {exc}")

        def dashboard_client(i: int) -> None:
            try:
                start.wait(60)
                with requests.Session() as s:
                    html = s.get(f"{base}/login", timeout=30).text
                    token = re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)
                    r = s.post(f"{base}/login", data={"email": f"ops{i}@example.test",
                                                      "password": "correct horse battery", "csrf_token": token},
                               timeout=30)
                    assert r.status_code == 200 and "/login" not in r.url, (r.status_code, r.url)
                    r = s.get(f"{base}/", timeout=30)  # the queue health page
                    assert r.status_code == 200 and "/login" not in r.url, (r.status_code, r.url)
                    with lock:
                        pages.append(r.status_code)
            except Exception as exc:
                with lock:
                    errors.append(f"dashboard client {i}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=f, args=(i,)) for f in (producer, api_client, dashboard_client)
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not errors, "\n".join(errors[:10])
        assert len(job_ids) == CLIENTS * JOBS_PER_CLIENT and len(pages) == CLIENTS
        assert len(event_ids) == CLIENTS * EVENTS_PER_CLIENT

        # A job that looks at its own connection, through the pooler: the role's settings and its
        # statement_timeout (SET LOCAL for the handler's block) are in force.
        with connect(db_url) as c:
            probe = jobqueue.enqueue(c, "test.settings", {}, tenant=tenant)["id"]
            n = lambda sql, *a: c.execute(sql, a).fetchone()["n"]
            wait_for(lambda: n("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'succeeded'",
                               job_ids + [probe]) == len(job_ids) + 1,
                     timeout=120, message="every job to run through the pooler")
            # Nothing lost, nothing twice.
            assert n("SELECT count(DISTINCT key) AS n FROM test_effects WHERE key LIKE 'p%%'") == len(job_ids)
            assert n("SELECT count(*) AS n FROM test_effects WHERE key LIKE 'p%%'") == len(job_ids)
            assert n("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND attempts <> 1", job_ids) == 0
            [seen] = [r["key"] for r in c.execute("SELECT key FROM test_effects WHERE job_id = %s", (probe,))]
            _, timeout, jit = seen.split()
            assert jit == "off" and timeout != "0", seen
            # Every event stored and relayed (the relay's claims and writes through the pooler too).
            wait_for(lambda: n("SELECT count(*) AS n FROM outbox_events WHERE id = ANY(%s::uuid[]) "
                               "AND relayed_at IS NOT NULL", event_ids) == len(event_ids),
                     timeout=60, message="every event to be relayed")
            # It all went through the pooler: thousands of transactions over at most POOL_SIZE server
            # connections (the direct URL carried only the LISTEN and the leader's lock).
            with pgbouncer.admin() as a:
                [stats] = [r for r in a.execute("SHOW STATS").fetchall() if r["database"] == pgbouncer.dbname]
            assert stats["total_xact_count"] > len(job_ids) + len(event_ids), stats
            # What is bound to a session did not: the leader's advisory lock and the LISTEN are
            # held by backends that are none of the pooler's server connections.
            session_bound = lambda: [r["pid"] for r in c.execute(  # noqa: E731
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                "UNION SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%%'")]
            pids = wait_for(lambda: len(session_bound()) >= 2 and session_bound(), timeout=30,
                            message="the leader's lock and the LISTEN connection")
            with pgbouncer.admin() as a:
                servers = {r["remote_pid"] for r in a.execute("SHOW SERVERS").fetchall()}
            assert servers and not set(pids) & servers, (pids, servers)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
        web.send_signal(signal.SIGTERM)
        web.wait(30)
    assert worker.wait(30) == 0
    worker_log = worker.log_path.read_text()
    web_text = web_log.read_text()
    for name, text in (("worker", worker_log), ("web", web_text), ("pgbouncer", pgbouncer.log())):
        assert not PREPARED.search(text), f"{name}: {PREPARED.search(text).group(0)}"
    # The worker says at start-up where its connections go; neither it nor the web app (which
    # logs warnings only, under gunicorn) warns about lost session settings.
    assert "worker: DATABASE_URL goes through a transaction pooler" in worker_log
    assert "session settings" not in worker_log + web_text
    assert "this worker is now the leader" in worker_log
