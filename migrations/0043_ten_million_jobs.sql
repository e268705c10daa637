-- 0043: the dashboard at ten million jobs (issue 24, `opsboard bench --scenario scale`).
--
-- Migrations run in a transaction (opsboard.migrate), so these are plain CREATE
-- INDEX: each holds a SHARE lock on its table (writes wait, reads do not) for
-- the time of its build.  On a large existing table, build them first with
-- CREATE INDEX CONCURRENTLY under the same names (docs/operations.md), then
-- migrate: IF NOT EXISTS makes this file a no-op for them.
--
-- * The dead-letter groups read every dead job (they are kept until resolved or
--   replayed, so they accumulate): through jobs_dead_idx each row cost a heap
--   visit, and dead rows lie scattered over the whole table (EXPLAIN ANALYZE at
--   1,000,000 jobs: 24,058 dead rows, 16,278 heap pages read).  The same index
--   carrying the columns the groups need answers it as an index-only scan.
--   Same key and predicate as jobs_dead_idx (0002), which serves nothing this
--   one does not: it is dropped by a contract migration of a later release (the
--   previous release's code names it).  Dead rows only: no entry on the hot path.
-- * The job list filtered by error code walked the primary key newest first
--   past every waiting job (which has no error code) and most finished ones:
--   (last_error_code, id) over the rows that have one (dead and retryable
--   jobs, a few percent) gives the page in index order.
-- * One tenant's jobs of a status few jobs reach (retryable, dead, cancelled),
--   newest first, for that tenant's viewers and the tenant filter: the tenant's
--   jobs were walked past its whole backlog (2.5 s for a large tenant's
--   cancelled jobs at ten million).  Not pending, which every job starts as: no
--   entry on the hot path's enqueue, only on a retry, a death or a cancel.
-- * A tenant's audit log, newest first: audit_log_at_idx walked every tenant's
--   records to find one tenant's (a tenant-scoped viewer's every page).
CREATE INDEX IF NOT EXISTS jobs_dead_groups_idx ON jobs (type, last_error_code, id)
    INCLUDE (finished_at, queue, tenant_id) WHERE status = 'dead';

CREATE INDEX IF NOT EXISTS jobs_error_code_idx ON jobs (last_error_code, id) WHERE last_error_code IS NOT NULL;

CREATE INDEX IF NOT EXISTS jobs_tenant_listed_idx ON jobs (tenant_id, status, id)
    WHERE status IN ('retryable', 'dead', 'cancelled');

CREATE INDEX IF NOT EXISTS audit_log_tenant_at_idx ON audit_log (tenant_id, at DESC, id DESC)
    WHERE tenant_id IS NOT NULL;
