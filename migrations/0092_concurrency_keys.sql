-- 0092: concurrency limits per dynamic key (issue 50).
--
-- A job type may declare a key computed from the job at enqueue (a webhook
-- delivery's endpoint, a tenant, a recipient) and a limit per key: at most
-- that many of its jobs with the same key run at once, across every worker.
-- The key is stored on the job (NULL: none, every job that existed before),
-- so that the claim counts a key's running jobs with a probe of a small
-- partial index (only running jobs with a key: at most the workers' slots)
-- instead of reading payloads.
ALTER TABLE jobs ADD COLUMN concurrency_key text CHECK (length(concurrency_key) BETWEEN 1 AND 200);

CREATE INDEX jobs_running_key_idx ON jobs (concurrency_key) WHERE status = 'running' AND concurrency_key IS NOT NULL;

-- An operator's live limit per key of a job type: kind 'key', target the job
-- type's name, value the running jobs per key (replacing the catalogue's).
ALTER TABLE limit_overrides DROP CONSTRAINT limit_overrides_kind_check,
    ADD CONSTRAINT limit_overrides_kind_check CHECK (kind IN ('type', 'provider', 'queue', 'key'));
