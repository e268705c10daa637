-- name: rate_limit_take
-- Take one token from a bucket, atomically, creating the bucket full on first use
-- (opsboard_take_token, migration 0016: the one copy of the refill arithmetic).
-- Returns whether it granted and, when not, the seconds until the next token.
SELECT granted, tokens, wait_seconds
FROM opsboard_take_token(%(name)s::text, %(capacity)s::float8, %(rate)s::float8,
                         coalesce(%(now)s::timestamptz, now()));

-- name: queue_depth_replace
-- Replace the sampled depth with a fresh count of unfinished and dead jobs by
-- queue, type, tenant and status (the leader's depth sampler, every few seconds).
WITH fresh AS (
    SELECT queue, type, tenant_id, status, count(*) AS jobs,
           min(available_at) FILTER (WHERE status IN ('pending', 'retryable')
                                       AND available_at <= coalesce(%(now)s::timestamptz, now())) AS oldest_ready
    -- Two arms, each read through its partial index (jobs_status_listed_idx,
    -- jobs_running_idx): one IN list of all four statuses matches neither, and
    -- the table is mostly succeeded jobs.
    FROM (SELECT queue, type, tenant_id, status, available_at FROM jobs
          WHERE status IN ('pending', 'retryable', 'dead')
          UNION ALL
          SELECT queue, type, tenant_id, status, available_at FROM jobs WHERE status = 'running') j
    GROUP BY queue, type, tenant_id, status
), gone AS (
    DELETE FROM queue_depth d
    WHERE NOT EXISTS (SELECT 1 FROM fresh f WHERE (f.queue, f.type, f.tenant_id, f.status)
                                                  = (d.queue, d.type, d.tenant_id, d.status))
)
INSERT INTO queue_depth (queue, type, tenant_id, status, jobs, oldest_ready, sampled_at)
SELECT queue, type, tenant_id, status, jobs, oldest_ready, coalesce(%(now)s::timestamptz, now()) FROM fresh
ON CONFLICT (queue, type, tenant_id, status) DO UPDATE SET
    jobs = excluded.jobs, oldest_ready = excluded.oldest_ready, sampled_at = excluded.sampled_at
RETURNING 1;

-- name: queue_depth_ready_by_queue
-- Ready-or-waiting jobs per queue from the last sample, with the sample's age.
SELECT queue, coalesce(sum(jobs) FILTER (WHERE status IN ('pending', 'retryable')), 0)::bigint AS waiting,
       max(sampled_at) AS sampled_at
FROM queue_depth GROUP BY queue;

-- name: tenant_enqueue_limits
-- A tenant's own enqueue rate and burst (NULL: the configured default).
SELECT enqueue_rate, enqueue_burst FROM tenants WHERE id = %(tenant_id)s;

-- name: admission_take
-- Admission in one statement: the queue's sampled depth against its mark (NULL:
-- no mark), the tenant's own rate and burst (or the defaults), and, only when
-- the queue has room, one token from the tenant's bucket (as rate_limit_take).
-- granted is NULL when the queue is full (no token taken); now is the clock
-- used (the transaction's, unless injected).
WITH now_ AS (SELECT coalesce(%(now)s::timestamptz, now()) AS t),
depth AS (
    SELECT coalesce(sum(jobs) FILTER (WHERE status IN ('pending', 'retryable')), 0)::bigint AS waiting
    FROM queue_depth WHERE queue = %(queue)s
), lim AS (
    SELECT coalesce((SELECT nullif(enqueue_rate, 0) FROM tenants WHERE id = %(tenant_id)s), %(default_rate)s::float8) AS rate,
           coalesce((SELECT nullif(enqueue_burst, 0) FROM tenants WHERE id = %(tenant_id)s), %(default_burst)s::int) AS burst
), admitted AS (
    -- OFFSET 0 keeps this a separate step: the token is taken (below) only for
    -- a row that passed the queue's mark, never when the queue is full.
    SELECT lim.rate, lim.burst, now_.t FROM now_, lim, depth
    WHERE %(mark)s::bigint IS NULL OR depth.waiting + 1 <= %(mark)s::bigint
    OFFSET 0
), take AS (
    SELECT tk.granted, tk.wait_seconds
    FROM admitted a
    CROSS JOIN LATERAL opsboard_take_token(%(name)s::text, greatest(1, a.burst)::float8, a.rate, a.t) tk
)
SELECT depth.waiting, lim.rate, lim.burst, take.granted, take.wait_seconds, (SELECT t FROM now_) AS now
FROM depth CROSS JOIN lim LEFT JOIN take ON true;
