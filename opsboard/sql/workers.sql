-- name: service_error_add
-- Count maintenance-service failures (lifetime totals, never pruned: they back
-- the opsboard_service_errors_total counter).
INSERT INTO service_errors AS s (service, errors, last_error_at)
SELECT service, n, now() FROM unnest(%(services)s::text[], %(counts)s::bigint[]) AS t(service, n)
ON CONFLICT (service) DO UPDATE SET errors = s.errors + excluded.errors, last_error_at = excluded.last_error_at;

-- name: service_error_totals
-- Every service's lifetime failure count, for /metrics.
SELECT service, errors, last_error_at FROM service_errors ORDER BY service;

-- name: job_still_held
-- Whether this attempt still holds its job: running, fenced by (locked_by,
-- attempts), and the lease not yet run out (even if no reaper has noticed).
-- "Running" is read from locked_by, which is set exactly while a job runs (a
-- check constraint): with status = 'running' here the planner may read the
-- whole running partial index, which statistics taken while little ran call
-- empty, instead of one primary-key probe (so in the statements below too).
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE id = %(id)s AND locked_by = %(worker)s AND attempts = %(attempt)s  -- locked_by: running (see below)
      AND locked_until > coalesce(%(now)s::timestamptz, now())
) AS held;

-- name: effect_begin_held
-- effect_begin, only while the calling attempt holds its job (see
-- job_still_held): a stale attempt starts nothing and adopts nothing.  The job
-- row is share-locked so that the reaper cannot take it between the check and
-- the insert.  Returns one row: held, and the effect (NULL columns when not held
-- and none exists); attempt is the attempt that started or last adopted it.
WITH held AS (
    SELECT EXISTS (
        SELECT 1 FROM jobs
        WHERE id = %(job_id)s AND locked_by = %(worker)s AND attempts = %(attempt)s
          AND locked_until > coalesce(%(now)s::timestamptz, now())
        FOR SHARE
    ) AS held
), up AS (
    INSERT INTO effects (key, job_id, tenant_id, provider, attempt)
    SELECT %(key)s, %(job_id)s, %(tenant_id)s, %(provider)s, %(attempt)s FROM held WHERE held.held
    ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, attempt = excluded.attempt
        WHERE effects.state = 'started' AND effects.tenant_id = excluded.tenant_id
    RETURNING *, (xmax = 0) AS created
), found AS (
    SELECT * FROM up
    UNION ALL
    SELECT *, false AS created FROM effects
    WHERE key = %(key)s AND tenant_id = %(tenant_id)s AND NOT EXISTS (SELECT 1 FROM up)
)
SELECT held.held, found.* FROM held LEFT JOIN found ON true;

-- name: job_running_by_worker
-- The jobs a (dead) worker process still holds, with how each one's earlier
-- runs ended: crashes (a worker died under it) versus any other end.
SELECT j.id, j.type, j.version, j.queue, j.tenant_id, j.attempts, j.max_attempts, j.group_key, j.started_at,
       (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id
         AND a.error_code IN ('crashed_worker', 'crash_suspect')) AS crashes,
       (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id
         AND a.outcome IN ('succeeded', 'retryable', 'dead', 'lease_expired')
         AND a.error_code IS DISTINCT FROM 'crashed_worker') AS other_ends
FROM jobs j
WHERE j.status = 'running' AND j.locked_by = %(worker)s
ORDER BY j.started_at;
