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
