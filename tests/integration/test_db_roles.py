"""Security item 9: the app runs as a role that cannot rewrite the audit log.

A cloned database gets the roles `opsboard migrate --print-roles-sql` prints;
the web app then runs as the application role: it signs in, replays a job
(writing an audit record), and cannot update, delete or truncate audit
records, nor disable the append-only trigger."""
from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from opsboard import auth
from opsboard.config import ROOT
from opsboard.db import Database
from opsboard.migrate import roles_sql
from tests.conftest import connect, csrf_from, make_config
from tests.support import dashboard as seed


@pytest.fixture
def roles(databases):
    url = databases.clone()
    suffix = uuid.uuid4().hex[:8]
    owner, app_role = f"ob_owner_{suffix}", f"ob_app_{suffix}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(roles_sql(owner, app_role))
    yield url, owner, app_role
    databases.drop(url)
    with psycopg.connect(databases.server_url, autocommit=True) as c:
        c.execute(f"DROP ROLE IF EXISTS {app_role}")
        c.execute(f"DROP ROLE IF EXISTS {owner}")


def test_cli_prints_the_roles_sql():
    out = subprocess.run([sys.executable, "-m", "opsboard.cli", "migrate", "--print-roles-sql", "--app-role", "web_app"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "REVOKE UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON audit_log FROM web_app" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "opsboard.cli", "migrate", "--print-roles-sql", "--app-role", "x;drop"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a plain role name" in bad.stderr and "Traceback" not in bad.stderr


def test_app_role_runs_the_dashboard_but_cannot_touch_audit_rows(roles):
    url, owner, app_role = roles
    with connect(url) as c:  # as the superuser: seed data
        t = seed.tenant(c, "acme")
        [job] = seed.jobs(c, t, 1)
        seed.kill(c, [job])
        auth.ensure_tenant(c, "operator", is_operator=True)
        auth.create_user(c, "ops@example.test", "correct horse battery", "ops", "operator")
        assert c.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'audit_log'").fetchone()[
            "tableowner"] == owner

    app_url = make_conninfo(url, user=app_role)
    from opsboard.web.app import create_app
    database = Database(app_url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": make_config(database_url=app_url), "DATABASE": database, "TESTING": True})
        client = app.test_client()
        r = client.post("/login", data={"email": "ops@example.test", "password": "correct horse battery",
                                        "csrf_token": csrf_from(client)})
        assert r.status_code == 302
        token = csrf_from(client, "/account")
        r = client.post(f"/jobs/{job}/replay", data={"csrf_token": token, "reason": "provider fixed",
                                                     "request_key": str(uuid.uuid4())},
                        headers={"Accept": "application/json"})
        assert r.status_code < 300, r.get_data(as_text=True)
        assert client.get("/audit/").status_code == 200
    finally:
        database.close()

    with psycopg.connect(app_url, autocommit=True) as c:
        # Row-level security: without a scope the app role reads no tenant's record, with the operator's all.
        assert c.execute("SELECT count(*) FROM audit_log WHERE action = 'job.replay'").fetchone()[0] == 0
        c.execute("SELECT set_config('opsboard.tenant_scope', '*', false)")
        assert c.execute("SELECT count(*) FROM audit_log WHERE action = 'job.replay'").fetchone()[0] == 1
        for statement in ("UPDATE audit_log SET reason = 'x'", "DELETE FROM audit_log", "TRUNCATE audit_log",
                          "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only",
                          "DROP TRIGGER audit_log_append_only ON audit_log",
                          "CREATE TABLE sneaky (id int)",
                          "DELETE FROM schema_migrations"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(statement)


def test_app_role_folds_the_depth_and_empties_the_old_deltas(roles):
    """issue 48 (migrations 0086, 0087): the depth fold runs in the worker as the application role, which has
    no TRUNCATE: it empties the old partition of job_count_deltas through the owner's function."""
    from opsboard import jobqueue, metrics
    url, owner, app_role = roles
    with connect(url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
    with connect(make_conninfo(url, user=app_role)) as c:
        c.execute("SELECT set_config('opsboard.tenant_scope', '*', false)")  # the leader's scope: every tenant
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("TRUNCATE job_count_deltas_0")
        for n in (3, 2):
            jobqueue.enqueue_many(c, [jobqueue.NewJob("diag.noop", {}, t) for _ in range(n)])
            metrics.sample_depth(c)
        assert c.execute("SELECT sum(jobs) AS n FROM queue_depth").fetchone()["n"] == 5
        assert metrics.depth_drift(c) == []
        assert c.execute("SELECT pg_relation_size('job_count_deltas_0') + pg_relation_size('job_count_deltas_1') "
                         "AS b").fetchone()["b"] == 0
