-- name: job_insert
-- Enqueue one job; with an idempotency key already live, insert nothing.
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
                  max_attempts, available_at, expires_at, correlation_id, event_id, replay_of)
VALUES (%(id)s, %(type)s, %(version)s, %(tenant_id)s, %(queue)s, %(priority)s, %(idempotency_key)s,
        %(group_key)s, %(payload)s, %(max_attempts)s,
        coalesce(%(run_at)s::timestamptz, now()), %(expires_at)s, %(correlation_id)s, %(event_id)s, %(replay_of)s)
ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
DO NOTHING
RETURNING *;

-- name: job_insert_many
-- Enqueue many jobs in one statement from parallel arrays.
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
                  max_attempts, available_at, expires_at, correlation_id, event_id)
SELECT id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
       max_attempts, coalesce(run_at, now()), expires_at, correlation_id, event_id
FROM unnest(%(ids)s::uuid[], %(types)s::text[], %(versions)s::smallint[], %(tenant_ids)s::uuid[],
            %(queues)s::text[], %(priorities)s::smallint[], %(idempotency_keys)s::text[],
            %(group_keys)s::text[], %(payloads)s::jsonb[], %(max_attempts)s::int[],
            %(run_ats)s::timestamptz[], %(expires_ats)s::timestamptz[], %(correlation_ids)s::text[],
            %(event_ids)s::uuid[])
     AS t(id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
          max_attempts, run_at, expires_at, correlation_id, event_id)
ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
DO NOTHING
RETURNING id;

-- name: job_get_live_by_key
-- The live job holding an idempotency key.
SELECT * FROM jobs
WHERE tenant_id = %(tenant_id)s AND type = %(type)s AND idempotency_key = %(idempotency_key)s
  AND status <> 'dead';

-- name: job_get
-- One job by id, inside a tenant scope.
SELECT * FROM jobs WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: job_get_for_update
-- One job by id, locked, inside a tenant scope.
SELECT * FROM jobs WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
FOR UPDATE;

-- name: job_cancel
-- Cancel a job that has not started (pending or waiting for a retry).
UPDATE jobs SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status IN ('pending', 'retryable')
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
RETURNING *;

-- name: job_claim_many
-- Claim up to %(limit)s ready jobs of one queue, by priority then age.
--
-- FOR UPDATE SKIP LOCKED lets any number of workers claim at once without
-- blocking on each other: a row another claim holds is simply passed over.
-- A job whose group has an older unfinished job waits (ordered groups); a
-- job past its expires_at is left to the expiry service.  The claim commits
-- at once: no transaction stays open while handlers run.  The fencing token
-- is (locked_by, attempts): every later write for this attempt checks both.
WITH ready AS (
    SELECT j.id FROM jobs j
    WHERE j.queue = %(queue)s
      AND j.status IN ('pending', 'retryable')
      AND j.available_at <= coalesce(%(now)s::timestamptz, now())
      AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
      AND (j.group_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobs g
            WHERE g.tenant_id = j.tenant_id AND g.group_key = j.group_key
              AND g.status IN ('pending', 'running', 'retryable') AND g.id < j.id))
    ORDER BY j.priority, j.available_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET status = 'running',
    attempts = j.attempts + 1,
    locked_by = %(worker)s,
    locked_until = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease)s),
    started_at = coalesce(%(now)s::timestamptz, now())
FROM ready
WHERE j.id = ready.id
RETURNING j.id, j.type, j.version, j.tenant_id, j.queue, j.priority, j.payload, j.attempts, j.max_attempts,
          j.idempotency_key, j.group_key, j.correlation_id, j.event_id, j.expires_at, j.created_at,
          j.started_at, j.locked_until;

-- name: job_record_outcomes
-- Record many outcomes in one statement.  Each row applies only while the job
-- is still running under this worker's fencing token (locked_by, attempts):
-- a worker whose lease was reclaimed writes nothing.  kind is succeeded,
-- retryable, dead, snoozed or released; snoozed and released give the
-- attempt back.  One job_attempts row is written per applied outcome.
WITH d AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::int[], %(kinds)s::text[], %(delays)s::float8[],
                         %(codes)s::text[], %(details)s::text[], %(started)s::timestamptz[],
                         %(durations)s::int[])
             AS d(id, token, kind, delay, code, detail, started_at, duration_ms)
), upd AS (
    UPDATE jobs j
    SET status = (CASE d.kind WHEN 'succeeded' THEN 'succeeded' WHEN 'dead' THEN 'dead'
                              WHEN 'retryable' THEN 'retryable' ELSE 'pending' END)::job_status,
        attempts = CASE WHEN d.kind IN ('snoozed', 'released') THEN j.attempts - 1 ELSE j.attempts END,
        available_at = CASE WHEN d.kind IN ('retryable', 'snoozed', 'released')
                            THEN coalesce(%(now)s::timestamptz, now()) + make_interval(secs => d.delay)
                            ELSE j.available_at END,
        last_error_code = CASE WHEN d.kind = 'succeeded' THEN j.last_error_code
                               WHEN d.kind = 'released' THEN j.last_error_code ELSE d.code END,
        finished_at = CASE WHEN d.kind IN ('succeeded', 'dead') THEN coalesce(%(now)s::timestamptz, now()) END,
        locked_by = NULL,
        locked_until = NULL
    FROM d
    WHERE j.id = d.id AND j.status = 'running' AND j.locked_by = %(worker)s AND j.attempts = d.token
    RETURNING j.id
), att AS (
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, detail,
                              duration_ms)
    SELECT d.id, d.token, %(worker)s, d.started_at, coalesce(%(now)s::timestamptz, now()), d.kind, d.code,
           d.detail, d.duration_ms
    FROM d JOIN upd ON upd.id = d.id
), eff AS (
    UPDATE effects e SET state = 'confirmed', confirmed_at = coalesce(%(now)s::timestamptz, now())
    FROM d JOIN upd ON upd.id = d.id
    WHERE d.kind = 'succeeded' AND d.id = ANY(%(effect_job_ids)s::uuid[]) AND e.job_id = d.id
      AND e.state = 'started'
)
SELECT id FROM upd;

-- name: job_heartbeat_many
-- Extend the leases of running jobs this worker still holds; returns those extended.
UPDATE jobs j
SET locked_until = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease)s)
FROM unnest(%(ids)s::uuid[], %(tokens)s::int[]) AS d(id, token)
WHERE j.id = d.id AND j.status = 'running' AND j.locked_by = %(worker)s AND j.attempts = d.token
RETURNING j.id;

-- name: job_rescue_expired
-- The lease reaper: running jobs whose lease ran out (their worker died or
-- hung) become retryable, or dead when no attempt is left.  One attempt row
-- records the lost attempt.
WITH lost AS (
    SELECT id, locked_by FROM jobs
    WHERE status = 'running' AND locked_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), upd AS (
    UPDATE jobs j
    SET status = (CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'retryable' END)::job_status,
        last_error_code = 'lease_expired',
        available_at = coalesce(%(now)s::timestamptz, now()),
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN coalesce(%(now)s::timestamptz, now()) END,
        locked_by = NULL,
        locked_until = NULL
    FROM lost
    WHERE j.id = lost.id
    RETURNING j.id, j.attempts, j.status, j.started_at, j.tenant_id, j.type, lost.locked_by AS worker
)
INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, detail)
SELECT id, attempts, coalesce(worker, 'unknown'), coalesce(started_at, coalesce(%(now)s::timestamptz, now())),
       coalesce(%(now)s::timestamptz, now()), 'lease_expired', 'lease_expired',
       'the worker stopped renewing its lease (crashed, killed or hung)'
FROM upd
RETURNING job_id;

-- name: job_expire_many
-- The expiry service: jobs that did not start before expires_at are pointless now.
WITH stale AS (
    SELECT id FROM jobs
    WHERE expires_at IS NOT NULL AND expires_at <= coalesce(%(now)s::timestamptz, now())
      AND status IN ('pending', 'retryable')
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'dead', last_error_code = 'expired',
                  finished_at = coalesce(%(now)s::timestamptz, now())
FROM stale WHERE j.id = stale.id
RETURNING j.id;

-- name: job_prune_finished
-- The pruner: delete succeeded and cancelled jobs finished before the cutoff,
-- with their attempts.  UUIDv7 ids sort by creation time, so the primary key
-- bounds the scan to old rows without an index on finished_at.
WITH old AS (
    SELECT id FROM jobs
    WHERE id < %(cutoff_id)s::uuid AND status IN ('succeeded', 'cancelled')
      AND finished_at < %(cutoff)s::timestamptz
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobs j USING old WHERE j.id = old.id
    RETURNING j.id
), att AS (
    DELETE FROM job_attempts a USING gone WHERE a.job_id = gone.id
)
SELECT count(*) AS n FROM gone;

-- name: job_stats_prune
-- Drop per-minute statistics older than the cutoff.
DELETE FROM job_stats WHERE minute < %(cutoff)s::timestamptz;

-- name: job_dead_select
-- Dead jobs matching a filter, for bulk replay.
SELECT id FROM jobs
WHERE status = 'dead'
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
  AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR finished_at < %(until)s)
ORDER BY id
LIMIT %(limit)s;

-- name: job_attempts_list
-- Every attempt of a job, oldest first.
SELECT * FROM job_attempts WHERE job_id = %(job_id)s ORDER BY started_at, attempt;

-- name: effect_begin
-- Record an external effect as started; returns the row (existing or new).
WITH ins AS (
    INSERT INTO effects (key, job_id, tenant_id, provider)
    VALUES (%(key)s, %(job_id)s, %(tenant_id)s, %(provider)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING *, true AS created
)
SELECT * FROM ins
UNION ALL
SELECT *, false AS created FROM effects WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM ins);

-- name: effect_set_ref
-- Remember the provider's reference for a started effect (and adopt it for this job).
UPDATE effects SET provider_ref = %(ref)s, job_id = %(job_id)s WHERE key = %(key)s RETURNING *;

-- name: worker_upsert
-- Register a worker process (or refresh it).
INSERT INTO workers (id, hostname, pid, queues, version, state, is_leader, running_jobs)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(version)s, 'running', false, 0)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), state = 'running';

-- name: worker_heartbeat
-- A worker is alive: refresh its row.
UPDATE workers SET last_seen_at = now(), state = %(state)s, is_leader = %(is_leader)s,
                   running_jobs = %(running_jobs)s
WHERE id = %(id)s;

-- name: worker_delete
-- A worker stopped cleanly.
DELETE FROM workers WHERE id = %(id)s;

-- name: worker_prune_stale
-- Forget workers silent for longer than the cutoff.
DELETE FROM workers WHERE last_seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
RETURNING id;

-- name: job_stats_add
-- Add a worker's per-minute counters (its own rows: workers never contend).
-- %(rows)s is a JSON array of objects; histograms are added element-wise.
INSERT INTO job_stats AS s (minute, worker_id, queue, type, succeeded, retried, dead, snoozed,
                            duration_ms_sum, duration_hist)
SELECT minute, worker_id, queue, type, succeeded, retried, dead, snoozed, duration_ms_sum, duration_hist
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS t(minute timestamptz, worker_id text, queue text, type text, succeeded int, retried int, dead int,
          snoozed int, duration_ms_sum bigint, duration_hist int[])
ON CONFLICT (minute, worker_id, queue, type) DO UPDATE SET
    succeeded = s.succeeded + excluded.succeeded,
    retried = s.retried + excluded.retried,
    dead = s.dead + excluded.dead,
    snoozed = s.snoozed + excluded.snoozed,
    duration_ms_sum = s.duration_ms_sum + excluded.duration_ms_sum,
    duration_hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
                          FROM unnest(s.duration_hist, excluded.duration_hist) AS x(a, b));
