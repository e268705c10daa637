-- 0098: row-level security (migration 0085) on the tables with a tenant_id that
-- migrations 0086-0097 added or rebuilt, and on every partition of such a
-- table (a partition named directly is not held to its parent's policy).
-- Same rule as 0085: enabled, forced, one policy reading opsboard.tenant_scope.
DO $rls$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS tbl, c.relname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
          AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)
        ORDER BY c.relname
    LOOP
        PERFORM opsboard_enable_tenant_rls(r.tbl,
            CASE WHEN r.relname IN ('notification_templates', 'pauses') THEN 'read'
                 WHEN r.relname IN ('alerts', 'audit_log', 'circuit_breakers', 'job_attempts')
                      OR r.relname LIKE 'job_attempts%' THEN 'write'
                 ELSE 'none' END);
    END LOOP;
END
$rls$;
