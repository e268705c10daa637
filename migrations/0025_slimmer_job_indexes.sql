-- 0025: fewer index entries per job on the hot path (issue 17).
--
-- A job's row is written three times (enqueue, claim, outcome) and none of
-- those updates is HOT (the status is in the predicate of most partial
-- indexes), so each write adds an entry to every index whose predicate the new
-- row meets: 12 entries per job before this migration, 9 after it.
--
-- * jobs_status_idx (status, id) had an entry for every row version.  What
--   reads it, the dashboard's status filter (newest first) and the depth
--   sampler, needs it for the statuses that are few among many: pending,
--   retryable, dead and cancelled.  Running jobs are found through the running
--   index below, succeeded ones (the bulk) through the primary key.
-- * jobs_running_idx (locked_until) and jobs_running_type_idx (type), both over
--   running jobs, become one (type, locked_until): the claim's limit counts
--   read it by type, the lease reaper reads all of it (the running jobs are
--   the slots and prefetch buffers of the live workers).
CREATE INDEX jobs_status_listed_idx ON jobs (status, id)
    WHERE status IN ('pending', 'retryable', 'dead', 'cancelled');
DROP INDEX jobs_status_idx;

CREATE INDEX jobs_running_idx_by_type ON jobs (type, locked_until) WHERE status = 'running';
DROP INDEX jobs_running_type_idx;
DROP INDEX jobs_running_idx;
ALTER INDEX jobs_running_idx_by_type RENAME TO jobs_running_idx;
