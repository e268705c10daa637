-- name: rate_limit_take
-- Take one token from a bucket, atomically, creating the bucket full on first use
-- (opsboard_take_token, migrations 0016 and 0054: the one copy of the refill
-- arithmetic), granting only while %(floor)s tokens would stay (0: any token; a
-- provider's non-critical jobs leave the critical queue's reserve).  Returns
-- whether it granted and, when not, the seconds until it would.
SELECT granted, tokens, wait_seconds
FROM opsboard_take_token(%(name)s::text, %(capacity)s::float8, %(rate)s::float8,
                         coalesce(%(now)s::timestamptz, now()), %(floor)s::float8);

-- name: rate_limit_refund
-- Give one token back to a bucket (never above its capacity): a request whose
-- token was taken in a transaction of its own and whose work then did not
-- happen (publish.publish_once, publish.publish_admitted).
UPDATE rate_limits SET tokens = least(capacity, tokens + 1) WHERE name = %(name)s;

-- name: queue_depth_slot_advance
-- Switch the jobs triggers to the other partition of job_count_deltas
-- (migration 0086) and return the one they wrote until now.  A sequence: the
-- switch writes no row version and every session sees it at once.
SELECT mod(nextval('job_count_slot') - 1, 2)::int AS slot;

-- name: queue_depth_slot_truncate
-- Empty the partition of job_count_deltas the fold folded (its slot
-- %(slot)s, locked by the fold), as the schema's owner (migration 0087).
SELECT opsboard_count_deltas_truncate(%(slot)s::int);

-- name: queue_depth_fold
-- Fold the appended per-statement changes (job_count_deltas, migration 0044)
-- into queue_depth, deleting them in the same statement: run in the fold's
-- transaction, a fold cut short commits neither, and rows appended meanwhile
-- (not in this statement's snapshot) stay for the next fold.  oldest_ready
-- takes the earliest entering job; a job leaving at or below it marks the
-- group stale.  Returns the groups
-- it touched: those at zero jobs are deleted (queue_depth_drop_empty), those
-- stale re-read (queue_depth_oldest_refresh).
WITH d AS (
    DELETE FROM job_count_deltas RETURNING queue, type, tenant_id, status, delta, min_in, min_out
), agg AS (
    SELECT queue, type, tenant_id, status, sum(delta) AS delta, min(min_in) AS min_in, min(min_out) AS min_out
    FROM d GROUP BY queue, type, tenant_id, status
), tot AS (
    INSERT INTO queue_depth_totals AS t (queue, type, status, jobs)
    SELECT queue, type, status, sum(delta) FROM agg GROUP BY queue, type, status
    ON CONFLICT (queue, type, status) DO UPDATE SET jobs = t.jobs + excluded.jobs
)
INSERT INTO queue_depth AS q (queue, type, tenant_id, status, jobs, oldest_ready, oldest_stale, last_out, sampled_at)
SELECT queue, type, tenant_id, status, delta, min_in, coalesce(min_out <= min_in, min_out IS NOT NULL), min_out,
       coalesce(%(now)s::timestamptz, now())
FROM agg
ON CONFLICT (queue, type, tenant_id, status) DO UPDATE SET
    jobs = q.jobs + excluded.jobs,
    oldest_ready = CASE WHEN q.jobs + excluded.jobs > 0 THEN least(q.oldest_ready, excluded.oldest_ready) END,
    oldest_stale = q.jobs + excluded.jobs > 0
                   AND (q.oldest_stale OR coalesce(excluded.last_out <= least(q.oldest_ready, excluded.oldest_ready),
                                                   false)),
    last_out = excluded.last_out,
    sampled_at = excluded.sampled_at
RETURNING queue, type, tenant_id, status, jobs, oldest_stale;

-- name: queue_depth_drop_empty
-- Forget the groups a fold left at zero jobs (%(keys)s: a JSON array of their keys).
DELETE FROM queue_depth q
USING jsonb_to_recordset(%(keys)s::jsonb) AS k(queue text, type text, tenant_id uuid, status job_status)
WHERE (q.queue, q.type, q.tenant_id, q.status) = (k.queue, k.type, k.tenant_id, k.status) AND q.jobs = 0;

-- name: queue_depth_running_replace
-- Running jobs per queue, type and tenant, recounted live: at most the
-- workers' slots and prefetch (jobs_running_idx), so never a large read; the
-- per-queue-and-type totals with them.  Stamps the fold's time.
WITH fresh AS (
    SELECT queue, type, tenant_id, count(*) AS jobs FROM jobs WHERE status = 'running'
    GROUP BY queue, type, tenant_id
), gone AS (
    DELETE FROM queue_depth d
    WHERE d.status = 'running'
      AND NOT EXISTS (SELECT 1 FROM fresh f WHERE (f.queue, f.type, f.tenant_id) = (d.queue, d.type, d.tenant_id))
), tot_gone AS (
    DELETE FROM queue_depth_totals t
    WHERE t.status = 'running' AND NOT EXISTS (SELECT 1 FROM fresh f WHERE (f.queue, f.type) = (t.queue, t.type))
), tot AS (
    INSERT INTO queue_depth_totals AS t (queue, type, status, jobs)
    SELECT queue, type, 'running', sum(jobs) FROM fresh GROUP BY queue, type
    ON CONFLICT (queue, type, status) DO UPDATE SET jobs = excluded.jobs WHERE t.jobs <> excluded.jobs
), stamp AS (
    UPDATE queue_depth_folds SET folded_at = coalesce(%(now)s::timestamptz, now())
)
INSERT INTO queue_depth AS q (queue, type, tenant_id, status, jobs, sampled_at)
SELECT queue, type, tenant_id, 'running', jobs, coalesce(%(now)s::timestamptz, now()) FROM fresh
ON CONFLICT (queue, type, tenant_id, status) DO UPDATE SET jobs = excluded.jobs, sampled_at = excluded.sampled_at
WHERE q.jobs <> excluded.jobs;

-- name: queue_depth_stale_keys
-- Stale groups a fold did not re-read (more than its share, or none of their
-- jobs in the window): a scan of queue_depth, run now and then.
SELECT queue, type, tenant_id, status FROM queue_depth WHERE oldest_stale LIMIT %(limit)s;

-- name: queue_depth_oldest_refresh
-- Re-read the oldest waiting job of the stale groups %(keys)s (a JSON array
-- of their keys).  Each reads the first %(scan)s entries of its tenant's
-- waiting jobs in the claim's order (jobs_ready_idx: priority, then
-- available_at) and takes the earliest of its type and status: exact when the
-- tenant has fewer waiting jobs in that queue, else the earliest among the
-- next %(scan)s the claim would take.  A group none of whose jobs is in that
-- window keeps its earlier (lower) value and stays stale.
WITH s AS (
    SELECT * FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(queue text, type text, tenant_id uuid, status job_status)
), r AS (
    SELECT s.*, w.oldest
    FROM s CROSS JOIN LATERAL (
        SELECT min(x.available_at) FILTER (WHERE x.type = s.type AND x.status = s.status) AS oldest
        FROM (SELECT j.type, j.status, j.available_at FROM jobs j
              WHERE j.queue = s.queue AND j.tenant_id = s.tenant_id AND j.status IN ('pending', 'retryable')
              ORDER BY j.priority, j.available_at, j.id
              LIMIT %(scan)s) x
    ) w
)
UPDATE queue_depth q
SET oldest_ready = coalesce(r.oldest, q.oldest_ready), oldest_stale = r.oldest IS NULL
FROM r
WHERE (q.queue, q.type, q.tenant_id, q.status) = (r.queue, r.type, r.tenant_id, r.status) AND q.oldest_stale
RETURNING 1;

-- name: queue_depth_recount
-- The self-check: in one snapshot, a full count of the waiting and dead jobs
-- beside the maintained one (queue_depth plus the changes not folded yet).
-- Reads every such job: for an operator's check and the tests, never on a
-- timer.  Returns only the groups that differ.
WITH fresh AS (
    SELECT queue, type, tenant_id, status, count(*) AS jobs FROM jobs
    WHERE status IN ('pending', 'retryable', 'dead')
    GROUP BY queue, type, tenant_id, status
), kept AS (
    SELECT queue, type, tenant_id, status, sum(jobs) AS jobs FROM (
        SELECT queue, type, tenant_id, status, jobs FROM queue_depth WHERE status IN ('pending', 'retryable', 'dead')
        UNION ALL
        SELECT queue, type, tenant_id, status, delta FROM job_count_deltas) m
    GROUP BY queue, type, tenant_id, status
)
SELECT coalesce(f.queue, k.queue) AS queue, coalesce(f.type, k.type) AS type,
       coalesce(f.tenant_id, k.tenant_id) AS tenant_id, coalesce(f.status, k.status)::text AS status,
       coalesce(f.jobs, 0)::bigint AS counted, coalesce(k.jobs, 0)::bigint AS maintained
FROM fresh f FULL JOIN kept k
  ON (f.queue, f.type, f.tenant_id, f.status) = (k.queue, k.type, k.tenant_id, k.status)
WHERE coalesce(f.jobs, 0) <> coalesce(k.jobs, 0)
ORDER BY 1, 2, 3, 4;

-- name: queue_depth_tenant_recount
-- The self-check of tenant_depth (0049): each tenant's row against queue_depth
-- summed per tenant and status (both maintained; queue_depth_recount checks
-- queue_depth against the jobs).  Returns only the tenants and statuses that differ.
WITH summed AS (
    SELECT tenant_id, status::text AS status, sum(jobs) AS jobs FROM queue_depth GROUP BY tenant_id, status
), kept AS (
    SELECT t.tenant_id, s.status, s.jobs
    FROM tenant_depth t
    CROSS JOIN LATERAL (VALUES ('pending', t.pending), ('running', t.running), ('retryable', t.retryable),
                               ('dead', t.dead)) AS s(status, jobs)
)
SELECT '*' AS queue, '*' AS type, coalesce(s.tenant_id, k.tenant_id) AS tenant_id,
       coalesce(s.status, k.status) AS status,
       coalesce(s.jobs, 0)::bigint AS counted, coalesce(k.jobs, 0)::bigint AS maintained
FROM summed s FULL JOIN kept k ON (s.tenant_id, s.status) = (k.tenant_id, k.status)
WHERE coalesce(s.jobs, 0) <> coalesce(k.jobs, 0)
ORDER BY 3, 4;

-- name: queue_depth_rebuild
-- The repair after a failed self-check: queue_depth from a full count of the
-- waiting and dead jobs (the caller has emptied it and job_count_deltas,
-- holding jobs in SHARE mode so that no change falls between).
INSERT INTO queue_depth (queue, type, tenant_id, status, jobs, oldest_ready, sampled_at)
SELECT queue, type, tenant_id, status, count(*), min(available_at) FILTER (WHERE status <> 'dead'), now()
FROM jobs WHERE status IN ('pending', 'retryable', 'dead')
GROUP BY queue, type, tenant_id, status;

-- name: queue_depth_totals_rebuild
-- The per-queue-and-type totals from queue_depth (after queue_depth_rebuild).
INSERT INTO queue_depth_totals (queue, type, status, jobs)
SELECT queue, type, status, sum(jobs) FROM queue_depth GROUP BY queue, type, status;

-- name: queue_depth_ready_by_queue
-- Ready-or-waiting jobs per queue from the fold's totals, with the fold's time.
SELECT queue, coalesce(sum(jobs) FILTER (WHERE status IN ('pending', 'retryable')), 0)::bigint AS waiting,
       (SELECT folded_at FROM queue_depth_folds) AS sampled_at
FROM queue_depth_totals GROUP BY queue;

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
    FROM queue_depth_totals WHERE queue = %(queue)s  -- the fold's totals: a few rows per queue
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
