-- 0029: live concurrency, the rest of issue 28.
--
-- * A queue's slots per worker, fleet-wide, set live by an operator: a
--   limit_overrides row of kind 'queue' (target: the queue's name, value: the
--   slots each worker serving that queue runs).  Workers re-read it with the
--   holds (the NOTIFY of 0027 and the one-second fallback) and grow or shrink
--   their slot threads; a worker started later reads it before its first slot.
-- * A tenant's concurrency: at most max_running of its jobs run at once across
--   every worker (NULL: no limit).  The claim receives the limited tenants as
--   parameters (read with the holds) and gives such a tenant no more than its
--   room.  Its enqueue rate and burst (0003) are read by every admission
--   already: a change is live at the next enqueue.
ALTER TABLE limit_overrides DROP CONSTRAINT limit_overrides_kind_check,
    ADD CONSTRAINT limit_overrides_kind_check CHECK (kind IN ('type', 'provider', 'queue'));

ALTER TABLE tenants ADD COLUMN max_running integer CHECK (max_running BETWEEN 1 AND 100000);

-- Workers re-read the tenants' concurrency limits at once on a change.
CREATE TRIGGER tenants_max_running_notify AFTER UPDATE OF max_running ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION pauses_notify();

-- The claim's room for a tenant (job_claim_many): NULL (no limit) unless caps,
-- a JSON object {tenant id: max_running} of the limited tenants, names it;
-- else the limit minus the tenant's running jobs, never below 0.  A function
-- so that the claim statement stays under psycopg's 4096-byte statement
-- cache; the running jobs are counted only for a limited tenant.  STRICT:
-- with no limited tenant the claim passes NULL and the function is never run.
CREATE FUNCTION opsboard_tenant_room(t uuid, caps jsonb) RETURNS integer LANGUAGE sql STABLE STRICT AS $$
    SELECT CASE WHEN caps ? t::text THEN
        greatest(0, (caps ->> t::text)::int
                    - (SELECT count(*) FROM jobs WHERE status = 'running' AND tenant_id = t)::int)
    END
$$;
