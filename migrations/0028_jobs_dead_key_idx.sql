-- Dead jobs by idempotency key.  The unique key index (0002) leaves dead jobs
-- out so that an audited replay can take the key again; a fan-out that runs a
-- second time (its worker killed after it began) must nevertheless find the
-- dead job of a delivery and not create a new one -- only a replay re-runs a
-- dead job.  This index makes that lookup (job_get_by_keys) cheap.
CREATE INDEX jobs_dead_key_idx ON jobs (tenant_id, type, idempotency_key)
    WHERE status = 'dead' AND idempotency_key IS NOT NULL;
