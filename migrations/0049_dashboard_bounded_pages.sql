-- 0049: the dashboard's dead-letter groups and tenants page bounded at ten
-- million jobs (issue 24, `opsboard bench --scenario scale`).
--
-- * Dead-letter groups are counted over the newest dead jobs (a window of
--   opsboard.dashboard.DEAD_WINDOW, shown on the page), not over every dead job
--   ever kept: 240,000 at ten million, 2.6 s.  Newest first needs the dead rows
--   in id order with what the groups read: one index for every tenant, one per
--   tenant (a tenant's viewer, the tenant filter).  Dead rows only: no entry on
--   the hot path.  Plain CREATE INDEX (see 0043 for a large existing table).
CREATE INDEX IF NOT EXISTS jobs_dead_recent_idx ON jobs (id)
    INCLUDE (type, last_error_code, finished_at, queue, tenant_id) WHERE status = 'dead';
CREATE INDEX IF NOT EXISTS jobs_dead_tenant_recent_idx ON jobs (tenant_id, id)
    INCLUDE (type, last_error_code, finished_at, queue) WHERE status = 'dead';

-- * The tenants page read every tenant's queue_depth groups (73,000 rows at
--   10,000 tenants) and sorted them in Python to show the 100 largest backlogs:
--   3.5 s at ten million jobs.  tenant_depth holds one row per tenant with its
--   waiting, running and dead counts, summed from queue_depth by statement-level
--   triggers on it (queue_depth has one writer, the leader's fold, so these rows
--   see no contention), and the page reads one keyset page of it in backlog
--   order (tenant_depth_waiting_idx).  A tenant's row stays (at zero) once it
--   had jobs: at most one per tenant.
CREATE TABLE tenant_depth (
    tenant_id uuid PRIMARY KEY,
    pending   bigint NOT NULL DEFAULT 0,
    running   bigint NOT NULL DEFAULT 0,
    retryable bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    waiting   bigint GENERATED ALWAYS AS (pending + retryable) STORED
);
CREATE INDEX tenant_depth_waiting_idx ON tenant_depth (waiting, tenant_id);

-- Each statement's net change per tenant and status, from its transition tables
-- (one aggregate per statement; a fold's statement touches the groups it changed).
CREATE FUNCTION tenant_depth_sums() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tenant_depth AS t (tenant_id, pending, running, retryable, dead)
        SELECT tenant_id, coalesce(sum(d) FILTER (WHERE status = 'pending'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'running'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'retryable'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'dead'), 0)
        FROM (SELECT tenant_id, status, sum(d) AS d FROM (SELECT tenant_id, status, jobs AS d FROM new_rows) y
              GROUP BY tenant_id, status HAVING sum(d) <> 0) x
        GROUP BY tenant_id
        ON CONFLICT (tenant_id) DO UPDATE SET pending = t.pending + excluded.pending,
            running = t.running + excluded.running, retryable = t.retryable + excluded.retryable,
            dead = t.dead + excluded.dead;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO tenant_depth AS t (tenant_id, pending, running, retryable, dead)
        SELECT tenant_id, coalesce(sum(d) FILTER (WHERE status = 'pending'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'running'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'retryable'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'dead'), 0)
        FROM (SELECT tenant_id, status, sum(d) AS d FROM (SELECT tenant_id, status, -jobs AS d FROM old_rows) y
              GROUP BY tenant_id, status HAVING sum(d) <> 0) x
        GROUP BY tenant_id
        ON CONFLICT (tenant_id) DO UPDATE SET pending = t.pending + excluded.pending,
            running = t.running + excluded.running, retryable = t.retryable + excluded.retryable,
            dead = t.dead + excluded.dead;
    ELSE
        INSERT INTO tenant_depth AS t (tenant_id, pending, running, retryable, dead)
        SELECT tenant_id, coalesce(sum(d) FILTER (WHERE status = 'pending'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'running'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'retryable'), 0),
               coalesce(sum(d) FILTER (WHERE status = 'dead'), 0)
        FROM (SELECT tenant_id, status, sum(d) AS d FROM (SELECT tenant_id, status, jobs AS d FROM new_rows UNION ALL SELECT tenant_id, status, -jobs FROM old_rows) y
              GROUP BY tenant_id, status HAVING sum(d) <> 0) x
        GROUP BY tenant_id
        ON CONFLICT (tenant_id) DO UPDATE SET pending = t.pending + excluded.pending,
            running = t.running + excluded.running, retryable = t.retryable + excluded.retryable,
            dead = t.dead + excluded.dead;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER queue_depth_tenant_insert AFTER INSERT ON queue_depth REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenant_depth_sums();
CREATE TRIGGER queue_depth_tenant_update AFTER UPDATE ON queue_depth
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenant_depth_sums();
CREATE TRIGGER queue_depth_tenant_delete AFTER DELETE ON queue_depth REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION tenant_depth_sums();

CREATE FUNCTION tenant_depth_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tenant_depth;
    RETURN NULL;
END;
$$;
CREATE TRIGGER queue_depth_tenant_truncate AFTER TRUNCATE ON queue_depth
    FOR EACH STATEMENT EXECUTE FUNCTION tenant_depth_truncate();

-- The triggers' lock (SHARE ROW EXCLUSIVE) keeps the fold out until this
-- commits: no change falls between this sum and the triggers.
INSERT INTO tenant_depth (tenant_id, pending, running, retryable, dead)
SELECT tenant_id, coalesce(sum(jobs) FILTER (WHERE status = 'pending'), 0),
       coalesce(sum(jobs) FILTER (WHERE status = 'running'), 0),
       coalesce(sum(jobs) FILTER (WHERE status = 'retryable'), 0),
       coalesce(sum(jobs) FILTER (WHERE status = 'dead'), 0)
FROM queue_depth GROUP BY tenant_id;
