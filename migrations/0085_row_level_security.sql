-- 0085: tenancy the database enforces (issue 42).  Every table with a tenant_id
-- gets row-level security, enabled and FORCED (so the tables' owner is held to
-- it too), as a second wall behind the queries' own tenant filters.
--
-- The policies read the transaction-local setting opsboard.tenant_scope
-- (opsboard/tenancy.py), which the web and the worker write into each
-- transaction with set_config(..., true), so it holds behind PgBouncer in
-- transaction mode:
--   ''         nothing (a query that forgot its scope sees no row, writes none)
--   'id,id'    those tenants' rows
--   '*'        every tenant's rows (only the bypasses named in opsboard/tenancy.py)
-- Superusers and roles with BYPASSRLS are not held to policies; the app must
-- run as neither (opsboard migrate --print-roles-sql, and the start-up check).
--
-- Each policy calls the two functions inside a scalar subquery, so the planner
-- evaluates them once per statement (an InitPlan), not once per row, and an
-- index on tenant_id still serves "tenant_id = ANY (...)".

CREATE FUNCTION opsboard_scope_all() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT coalesce(current_setting('opsboard.tenant_scope', true), '') = '*' $$;

CREATE FUNCTION opsboard_scope_ids() RETURNS uuid[]
    LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN s IS NULL OR s IN ('', '*') THEN '{}'::uuid[]
               ELSE string_to_array(s, ',')::uuid[] END
   FROM current_setting('opsboard.tenant_scope', true) AS s $$;

-- A scope is set at all (some tenant, or every tenant).
CREATE FUNCTION opsboard_scope_any() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT coalesce(current_setting('opsboard.tenant_scope', true), '') <> '' $$;

-- Row-level security on one table with a tenant_id: enabled, forced, one policy.
--   platform_rows = 'none':  only rows of the scope's tenants (tenant_id NOT NULL tables).
--   platform_rows = 'read':  rows with a NULL tenant_id (the platform's) are read by any scope
--                            but written only by the every-tenant scope (templates, pauses).
--   platform_rows = 'write': rows with a NULL tenant_id are read and written by any scope
--                            (alerts, audit records, provider breakers, attempts of old jobs).
-- Later migrations that add a table with tenant_id call it (tests/integration/test_row_level_security.py
-- fails for a table without a policy).
CREATE FUNCTION opsboard_enable_tenant_rls(tbl regclass, platform_rows text DEFAULT 'none') RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    own text := '(SELECT opsboard_scope_all()) OR tenant_id = ANY (CAST((SELECT opsboard_scope_ids()) AS uuid[]))';
    platform text := own || ' OR (tenant_id IS NULL AND (SELECT opsboard_scope_any()))';
BEGIN
    IF platform_rows NOT IN ('none', 'read', 'write') THEN
        RAISE EXCEPTION 'platform_rows must be none, read or write, not %', platform_rows;
    END IF;
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', tbl);
    IF platform_rows = 'none' THEN
        EXECUTE format('CREATE POLICY tenant_scope ON %s USING (%s)', tbl, own);
    ELSIF platform_rows = 'write' THEN
        EXECUTE format('CREATE POLICY tenant_scope ON %s USING (%s)', tbl, platform);
    ELSE
        EXECUTE format('CREATE POLICY tenant_scope_read ON %s FOR SELECT USING (%s)', tbl, platform);
        EXECUTE format('CREATE POLICY tenant_scope_insert ON %s FOR INSERT WITH CHECK (%s)', tbl, own);
        EXECUTE format('CREATE POLICY tenant_scope_update ON %s FOR UPDATE USING (%s) WITH CHECK (%s)',
                       tbl, own, own);
        EXECUTE format('CREATE POLICY tenant_scope_delete ON %s FOR DELETE USING (%s)', tbl, own);
    END IF;
END
$$;

DO $rls$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS tbl, c.relname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY c.relname
    LOOP
        PERFORM opsboard_enable_tenant_rls(r.tbl,
            CASE WHEN r.relname IN ('notification_templates', 'pauses') THEN 'read'
                 WHEN r.relname IN ('alerts', 'audit_log', 'circuit_breakers', 'job_attempts') THEN 'write'
                 ELSE 'none' END);
    END LOOP;
END
$rls$;

-- Views read their tables with the rights of the one who asks (PostgreSQL 15's
-- security_invoker), not of the view's owner: the owner is held to the
-- policies too (FORCE), and a view run as its owner would see the scope of
-- nobody.  notification_deliveries (migrations 0056, 0070) is the only one.
DO $views$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT c.oid::regclass AS view FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind = 'v'
    LOOP
        EXECUTE format('ALTER VIEW %s SET (security_invoker = true)', v.view);
    END LOOP;
END
$views$;
