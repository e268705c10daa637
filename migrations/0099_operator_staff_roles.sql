-- 0099: which users are the operator's staff, readable from any tenant's scope
-- (issue 42).  A tenant's pages show operator staff by role, never by address
-- (the audit log, alerts, job resolutions): that needs the operator tenants'
-- memberships, which row-level security (0085) hides from a tenant's scope,
-- so the staff went unrecognized and their addresses showed.  This function
-- reads them in every tenant's scope for the duration of the call (its SET
-- clause; opsboard/tenancy.py, Bypass.STAFF_ROLES) and returns only the user's
-- operator role, nothing of any tenant's rows.
CREATE FUNCTION opsboard_operator_staff_role(who uuid) RETURNS text
    LANGUAGE sql STABLE
    SET opsboard.tenant_scope = '*'
AS $$
    SELECT m.role::text FROM memberships m JOIN tenants t ON t.id = m.tenant_id
    WHERE m.user_id = who AND t.is_operator
    ORDER BY m.role LIMIT 1
$$;
