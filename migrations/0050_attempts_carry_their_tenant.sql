-- 0050: a tenant's page at ten million jobs (issue 24, `opsboard bench --scenario scale`).
--
-- A tenant's detail page read every tenant's attempts of its window and
-- joined each to its job to keep the tenant's: the chart's last hour (5,813
-- buffers) and the "failures in 24 h" list (18,476 buffers: a BRIN range of
-- every tenant's day of attempts, then the join), 240-650 ms in all.
--
-- * Each attempt row carries its job's tenant (written by the statements that
--   write attempts; they hold the job's row already): the chart filters the
--   window's attempts by it, with no join.
-- * The failed attempts (retryable, dead, lease_expired: a few percent of the
--   attempts, no entry for a success, so none on the hot path's common case)
--   are indexed by tenant and time: the latest failures of one tenant are an
--   index range read backwards, whatever the other tenants do.
-- * The queue health page's "top failing error codes" read every failed
--   attempt of the last hour and joined each to its job for its type and queue
--   (165,070 buffers, 250-450 ms at ten million jobs, 40,938 failures in the
--   seed's last hour): it now counts the newest ones (a window the page states,
--   opsboard.dashboard.TOP_CODES_WINDOW) through the failed attempts by time.
--
-- Nothing is back-filled: rewriting a day of attempts would move them to the
-- end of the table (the BRIN ranges every window reads would widen) for a
-- week.  Rows without a tenant (written before this, or by a worker of the
-- previous release during a rolling deploy) are read the old way, through
-- their job: the index holds them under NULL, so once they age out of the
-- page's windows (a day) that part reads nothing.  Plain CREATE INDEX (see
-- 0043 for a large existing table).
ALTER TABLE job_attempts ADD COLUMN IF NOT EXISTS tenant_id uuid;
CREATE INDEX IF NOT EXISTS job_attempts_tenant_failed_idx ON job_attempts (tenant_id, finished_at)
    INCLUDE (outcome, error_code, job_id) WHERE outcome IN ('retryable', 'dead', 'lease_expired');
CREATE INDEX IF NOT EXISTS job_attempts_failed_idx ON job_attempts (finished_at)
    INCLUDE (outcome, error_code, job_id, tenant_id) WHERE outcome IN ('retryable', 'dead', 'lease_expired');
