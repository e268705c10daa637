"""Issue 42: tenancy the database enforces.

After the migrations every table with a ``tenant_id`` has forced row-level security and a policy;
the application role (neither superuser nor BYPASSRLS) reads no tenant's rows without a scope, one
tenant's rows in that tenant's scope, and cannot write another tenant's rows; the app's connection
class carries the scope of :mod:`opsboard.tenancy` into every transaction, also for a statement run
outside one.
"""
from __future__ import annotations

import uuid

import psycopg
import pytest

from opsboard import db, tenancy
from opsboard.db import Database
from tests.conftest import APP_ROLE, app_url, connect
from tests.support import dashboard as seed


def _tenant_tables(c) -> list[dict]:
    return c.execute("""
        SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
               (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
        ORDER BY c.relname""").fetchall()


def test_every_table_with_a_tenant_id_has_forced_row_level_security_and_a_policy(db_url):
    with connect(db_url) as c:
        tables = _tenant_tables(c)
    assert len(tables) >= 30, [t["relname"] for t in tables]  # jobs, tickets, notifications, ... and the demo's
    missing = [t["relname"] for t in tables
               if not (t["relrowsecurity"] and t["relforcerowsecurity"] and t["policies"] >= 1)]
    assert missing == [], f"tables with tenant_id but no forced row-level security and policy: {missing}"


def test_a_new_table_with_a_tenant_id_and_no_policy_is_found(db_url):
    """The check above can fail: a table added without the migration's function is named."""
    with connect(db_url) as c:
        c.execute("CREATE TABLE forgot_policy (id int, tenant_id uuid)")
        assert "forgot_policy" in [t["relname"] for t in _tenant_tables(c)
                                   if not (t["relrowsecurity"] and t["relforcerowsecurity"] and t["policies"])]
        c.execute("SELECT opsboard_enable_tenant_rls('forgot_policy')")
        assert "forgot_policy" not in [t["relname"] for t in _tenant_tables(c)
                                       if not (t["relrowsecurity"] and t["relforcerowsecurity"] and t["policies"])]


def test_the_app_role_is_neither_superuser_nor_bypassrls(db_url):
    with psycopg.connect(app_url(db_url), autocommit=True) as c:
        row = c.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        assert c.execute("SELECT current_user").fetchone()[0] == APP_ROLE
    assert row == (False, False)


@pytest.fixture
def two_tenants(db_url):
    with connect(db_url) as c:
        a, b = seed.tenant(c, "acme"), seed.tenant(c, "globex")
        seed.jobs(c, a, 3)
        seed.jobs(c, b, 2)
    return a, b


def _count(c, table="jobs") -> int:
    return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_without_a_scope_the_app_role_reads_no_tenants_rows(db_url, two_tenants):
    with psycopg.connect(app_url(db_url), autocommit=True) as c:
        assert _count(c) == 0
        with connect(db_url) as su:  # the superuser sees them: they are there
            assert su.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 5
        with connect(db_url) as su:
            tables = [t["relname"] for t in _tenant_tables(su)]
        for table in tables:
            assert _count(c, table) == 0, table


def test_a_tenants_scope_reads_and_writes_only_its_rows(db_url, two_tenants):
    a, b = two_tenants
    with psycopg.connect(app_url(db_url), autocommit=True) as c:
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', %s, true)", (str(a),))
            assert _count(c) == 3
            assert c.execute("SELECT count(*) FROM jobs WHERE tenant_id = %s", (b,)).fetchone()[0] == 0
            # Another tenant's rows cannot be changed or deleted (they are not there) ...
            assert c.execute("UPDATE jobs SET priority = 9 WHERE tenant_id = %s", (b,)).rowcount == 0
            assert c.execute("DELETE FROM jobs WHERE tenant_id = %s", (b,)).rowcount == 0
        # ... nor written: a row of another tenant is refused.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with c.transaction():
                c.execute("SELECT set_config('opsboard.tenant_scope', %s, true)", (str(a),))
                c.execute("INSERT INTO jobs (id, type, version, tenant_id, queue, payload) "
                          "VALUES (%s, 'x', 1, %s, 'default', '{}')", (uuid.uuid4(), b))
        # The scope ends with its transaction (set_config(..., true)): nothing leaks to the next one.
        assert _count(c) == 0
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', %s, true)", (f"{a},{b}",))
            assert _count(c) == 5
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', '*', true)")
            assert _count(c) == 5
    with connect(db_url) as su:
        assert su.execute("SELECT count(*) AS n FROM jobs WHERE priority = 9").fetchone()["n"] == 0


def test_the_app_connection_carries_the_scope_of_the_unit_of_work(db_url, two_tenants):
    """opsboard.db's connections: a transaction and a lone statement both take tenancy's scope."""
    a, b = two_tenants
    database = Database(app_url(db_url), min_size=1, max_size=2).open()
    try:
        with database.connection() as c:
            assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0  # no scope
            with tenancy.tenant(a):
                assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 3  # a lone statement
                with c.transaction():
                    assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 3
                with c.cursor() as cur:
                    assert cur.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 3
            with tenancy.tenant(b):
                assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 2
            with tenancy.bypass(tenancy.Bypass.OPERATOR):
                assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 5
            assert c.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
            # A named query that forgets its tenant filter still returns only the scope's rows.
            with tenancy.tenant(b):
                ids = {r["tenant_id"] for r in c.execute("SELECT tenant_id FROM jobs").fetchall()}
            assert ids == {b}
    finally:
        database.close()


def test_a_bypass_needs_a_reason():
    with pytest.raises(TypeError):
        with tenancy.bypass("because"):
            pass
    with pytest.raises(ValueError):
        with tenancy.tenants(["not-a-uuid"]):
            pass


def test_platform_rows_are_read_by_every_scope_but_written_only_by_the_operators(db_url, two_tenants):
    a, _ = two_tenants
    with connect(db_url) as su:
        from opsboard.notifications import templates
        templates.seed(su, "rls.check", "email", "fa", "موضوع", "متن", [], {})
        n_platform = su.execute("SELECT count(*) AS n FROM notification_templates WHERE tenant_id IS NULL"
                                ).fetchone()["n"]
    assert n_platform > 0  # the shipped templates are the platform's
    with psycopg.connect(app_url(db_url), autocommit=True) as c:
        assert _count(c, "notification_templates") == 0
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', %s, true)", (str(a),))
            assert c.execute("SELECT count(*) FROM notification_templates WHERE tenant_id IS NULL"
                             ).fetchone()[0] == n_platform
            assert c.execute("UPDATE notification_templates SET subject = 'x' WHERE tenant_id IS NULL"
                             ).rowcount == 0
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', '*', true)")
            assert c.execute("SELECT count(*) FROM notification_templates WHERE tenant_id IS NULL"
                             ).fetchone()[0] == n_platform


def test_the_policys_functions_run_once_per_statement_and_keep_the_tenant_index(db_url, two_tenants):
    """The scope is read in an InitPlan (not per row), and a tenant's rows are found by index."""
    a, _ = two_tenants
    with psycopg.connect(app_url(db_url), autocommit=True) as c:
        with c.transaction():
            c.execute("SELECT set_config('opsboard.tenant_scope', %s, true)", (str(a),))
            c.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in c.execute("EXPLAIN SELECT id FROM tickets"))
    assert "InitPlan" in plan, plan
    assert "Index" in plan, plan


def test_production_refuses_to_run_the_app_as_a_superuser(db_url):
    from opsboard.config import ConfigError
    from opsboard.web.app import create_app
    from tests.conftest import make_config
    database = Database(db_url, min_size=1, max_size=2).open()  # the server's superuser
    try:
        config = make_config(database_url=db_url).replace(mode="production", secret_key="p" * 40)
        with pytest.raises(ConfigError, match="superuser.*row-level security"):
            create_app({"OPSBOARD": config, "DATABASE": database})
    finally:
        database.close()


def test_views_read_with_the_rights_of_the_caller(db_url):
    """A view run as its owner would be held to the owner's (empty) scope: every view is security_invoker."""
    with connect(db_url) as c:
        views = c.execute("SELECT c.relname, coalesce(c.reloptions, '{}') AS opts FROM pg_class c "
                          "JOIN pg_namespace n ON n.oid = c.relnamespace "
                          "WHERE n.nspname = 'public' AND c.relkind = 'v'").fetchall()
    assert views, "notification_deliveries is a view"
    assert [v["relname"] for v in views if "security_invoker=true" not in v["opts"]] == []
