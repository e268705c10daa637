-- name: metrics_depth_by_queue_type
-- Maintained depth per queue, type and status inside a tenant scope, with the
-- oldest due waiting job (queue_depth keeps the earliest available_at, due or
-- not: shown once due) and when the leader last folded.
SELECT queue, type, status::text AS status, sum(jobs)::bigint AS jobs,
       min(oldest_ready) FILTER (WHERE oldest_ready <= coalesce(%(now)s::timestamptz, now())) AS oldest_ready,
       (SELECT folded_at FROM queue_depth_folds) AS sampled_at
FROM queue_depth
WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
GROUP BY queue, type, status;

-- name: metrics_depth_totals
-- Maintained depth per queue, type and status over every tenant (the fold's
-- totals: a few rows whatever the number of tenants), with the oldest due
-- waiting job of each (one probe of queue_depth_oldest_idx).
SELECT t.queue, t.type, t.status::text AS status, t.jobs,
       (SELECT d.oldest_ready FROM queue_depth d
        WHERE d.queue = t.queue AND d.type = t.type AND d.status = t.status AND d.oldest_ready IS NOT NULL
        ORDER BY d.oldest_ready LIMIT 1) AS oldest_ready,
       (SELECT folded_at FROM queue_depth_folds) AS sampled_at
FROM queue_depth_totals t
WHERE t.jobs <> 0;

-- name: metrics_depth_by_tenant
-- Maintained depth per tenant and status inside a scope, with the oldest due
-- waiting job.  Summed per tenant before the join (a hash aggregate over the
-- groups, then one tenant row each), not sorted by the tenant's text columns.
SELECT d.tenant_id, t.slug, t.name, t.weight, d.status, d.jobs, d.oldest_ready
FROM (SELECT tenant_id, status::text AS status, sum(jobs)::bigint AS jobs,
             min(oldest_ready) FILTER (WHERE oldest_ready <= coalesce(%(now)s::timestamptz, now())) AS oldest_ready
      FROM queue_depth
      WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
        AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      GROUP BY tenant_id, status) d
JOIN tenants t ON t.id = d.tenant_id;

-- name: metrics_tenant_page
-- One page of tenants by backlog (waiting jobs), most first, inside a scope:
-- tenant_depth (0049, kept from queue_depth by triggers) in the order of
-- tenant_depth_waiting_idx, from the keyset cursor (%(after_waiting)s,
-- %(after_id)s): the last row of the previous page.  Tenants whose counts are
-- all zero are left out.  Never OFFSET.
SELECT d.tenant_id, t.slug, t.name, t.weight, d.pending, d.running, d.retryable, d.dead, d.waiting
FROM tenant_depth d
JOIN tenants t ON t.id = d.tenant_id
WHERE (%(scope_all)s OR d.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (d.pending > 0 OR d.running > 0 OR d.retryable > 0 OR d.dead > 0)
  AND (%(after_waiting)s::bigint IS NULL OR (d.waiting, d.tenant_id) < (%(after_waiting)s, %(after_id)s::uuid))
ORDER BY d.waiting DESC, d.tenant_id DESC
LIMIT %(limit)s;

-- name: metrics_tenant_page_count
-- How many tenants in scope have jobs waiting, running or dead: one row per
-- tenant at most (the page's "of N").
SELECT count(*) AS n FROM tenant_depth
WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (pending > 0 OR running > 0 OR retryable > 0 OR dead > 0);

-- name: metrics_oldest_ready_by_tenant
-- The oldest due waiting job of each of the tenants %(ids)s (a page's), from
-- their queue_depth groups: one probe of queue_depth_tenant_idx per tenant (a
-- plain "tenant_id = ANY" was planned as a scan of every tenant's groups).
SELECT i.tenant_id,
       (SELECT min(q.oldest_ready) FILTER (WHERE q.oldest_ready <= coalesce(%(now)s::timestamptz, now()))
        FROM queue_depth q WHERE q.tenant_id = i.tenant_id) AS oldest_ready
FROM unnest(%(ids)s::uuid[]) AS i(tenant_id);

-- name: metrics_depth_by_tenant_queue_type
-- One tenant's maintained depth per queue, type and status.
SELECT queue, type, status::text AS status, jobs,
       CASE WHEN oldest_ready <= coalesce(%(now)s::timestamptz, now()) THEN oldest_ready END AS oldest_ready
FROM queue_depth
WHERE tenant_id = %(tenant_id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY queue, type, status;

-- name: metrics_running_by_tenant
-- Jobs running right now per tenant (live: at most the number of worker slots).
SELECT tenant_id, queue, count(*) AS running FROM jobs WHERE status = 'running'
GROUP BY tenant_id, queue;

-- name: metrics_stats_by_queue_type
-- Handler statistics per queue and type since %(since)s.
SELECT queue, type, sum(succeeded)::bigint AS succeeded, sum(retried)::bigint AS retried,
       sum(dead)::bigint AS dead, sum(snoozed)::bigint AS snoozed, sum(duration_ms_sum)::bigint AS duration_ms_sum,
       count(DISTINCT minute) AS minutes
FROM job_stats WHERE minute >= %(since)s::timestamptz
GROUP BY queue, type;

-- name: metrics_stats_hist
-- Handler-time histograms per queue and type since %(since)s (summed element-wise in Python).
SELECT queue, type, duration_hist FROM job_stats WHERE minute >= %(since)s::timestamptz;

-- name: metrics_stats_series
-- Per-minute totals since %(since)s, per queue, for sparklines.
SELECT minute, queue, sum(succeeded)::bigint AS succeeded, sum(retried + dead)::bigint AS failed
FROM job_stats WHERE minute >= %(since)s::timestamptz
GROUP BY minute, queue ORDER BY minute;

-- name: metrics_stats_totals
-- Lifetime outcomes per queue and type (Prometheus counters): the totals the
-- pruner folded in plus the kept per-minute rows, read in one statement (one
-- snapshot), so a prune committing meanwhile never makes them drop.
SELECT queue, type, sum(succeeded)::bigint AS succeeded, sum(retried)::bigint AS retried,
       sum(dead)::bigint AS dead, sum(snoozed)::bigint AS snoozed
FROM (SELECT queue, type, succeeded, retried, dead, snoozed FROM job_stats
      UNION ALL
      SELECT queue, type, succeeded, retried, dead, snoozed FROM job_stats_totals) AS s
GROUP BY queue, type;

-- name: metrics_workers_live
-- Worker processes seen recently, for "no live worker" and the dashboard.
SELECT id, hostname, pid, queues, state, is_leader, running_jobs, abandoned_threads, started_at, last_seen_at,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - last_seen_at) AS silent_seconds
FROM workers ORDER BY started_at;

-- name: metrics_chart_counts
-- Finished attempts and failures per time bucket, queue and type since
-- %(since)s (buckets of %(bucket_minutes)s minutes aligned on %(origin)s).
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), minute, %(origin)s::timestamptz) AS bucket, queue, type,
       sum(succeeded + retried + dead)::bigint AS processed, sum(retried + dead)::bigint AS failed
FROM job_stats WHERE minute >= %(since)s::timestamptz
GROUP BY 1, 2, 3;

-- name: metrics_chart_hist
-- Handler-time histograms per time bucket, queue and type, summed cell by cell
-- for p95 per bucket: one sum per cell (the 16 of DURATION_BUCKETS_MS and the
-- overflow, as metrics_history_window), not an unnest of every cell of every
-- row (37 ms for the hour of 2 workers x 4 types, issue 44).
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), minute, %(origin)s::timestamptz) AS bucket, queue, type,
       ARRAY[sum(duration_hist[1]), sum(duration_hist[2]), sum(duration_hist[3]), sum(duration_hist[4]), sum(duration_hist[5]), sum(duration_hist[6]), sum(duration_hist[7]), sum(duration_hist[8]), sum(duration_hist[9]), sum(duration_hist[10]), sum(duration_hist[11]), sum(duration_hist[12]), sum(duration_hist[13]), sum(duration_hist[14]), sum(duration_hist[15]), sum(duration_hist[16])]::bigint[] AS hist
FROM job_stats WHERE minute >= %(since)s::timestamptz
GROUP BY 1, 2, 3;

-- name: metrics_tenant_chart
-- One tenant's finished attempts, failures and p95 handler time per time bucket
-- (from its attempts: job_stats are not per tenant).  The window's attempts
-- (the BRIN range on finished_at) kept by the tenant each carries (0050): no
-- join to jobs, which cost every tenant's attempt of the window a hash probe
-- against the tenant's every job.  An attempt without one (written before
-- 0050, or by a worker of the previous release) is kept through its job; while
-- the window holds many, opsboard.metrics.tenant_chart runs
-- metrics_tenant_chart_joined instead (one probe per such attempt cost 194,998
-- buffers in the hour after 0050, 4.9 million over 24 hours).
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), a.finished_at, %(origin)s::timestamptz) AS bucket,
       count(*) FILTER (WHERE a.outcome IN ('succeeded', 'retryable', 'dead')) AS processed,
       count(*) FILTER (WHERE a.outcome IN ('retryable', 'dead', 'lease_expired')) AS failed,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms)
           FILTER (WHERE a.outcome IN ('succeeded', 'retryable', 'dead')) AS p95
FROM job_attempts a
WHERE a.finished_at >= %(since)s::timestamptz
  AND (a.tenant_id = %(tenant_id)s
       OR (a.tenant_id IS NULL
           AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = a.job_id AND j.tenant_id = %(tenant_id)s)))
GROUP BY 1;

-- name: metrics_tenant_chart_joined
-- metrics_tenant_chart through the jobs of the attempts (as before 0050): for a
-- window that still holds attempts written without their tenant.
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), a.finished_at, %(origin)s::timestamptz) AS bucket,
       count(*) FILTER (WHERE a.outcome IN ('succeeded', 'retryable', 'dead')) AS processed,
       count(*) FILTER (WHERE a.outcome IN ('retryable', 'dead', 'lease_expired')) AS failed,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms)
           FILTER (WHERE a.outcome IN ('succeeded', 'retryable', 'dead')) AS p95
FROM job_attempts a JOIN jobs j ON j.id = a.job_id
WHERE j.tenant_id = %(tenant_id)s AND a.finished_at >= %(since)s::timestamptz
GROUP BY 1;

-- name: metrics_attempts_without_tenant
-- Whether failed attempts written without their tenant (before 0050, or by a
-- worker of the previous release) finished since %(since)s: the NULL end of
-- job_attempts_tenant_failed_idx, a probe of a few buffers.  A window that has
-- them has others (failures are a few percent of the attempts) and is charted
-- through the jobs.
SELECT EXISTS (SELECT 1 FROM job_attempts
               WHERE tenant_id IS NULL AND finished_at >= %(since)s::timestamptz
                 AND outcome IN ('retryable', 'dead', 'lease_expired')) AS found;

-- name: metrics_tenant_recent_failures
-- One tenant's latest failed attempts: a backward range of
-- job_attempts_tenant_failed_idx (0050), then their jobs by primary key.
-- Before, every tenant's attempts of the window were read and joined to their
-- jobs, a cost that grew with the whole fleet's failures.  Attempts without a
-- tenant (written before 0050, or by a worker of the previous release) are
-- under NULL in that index and found through their job, as before.
SELECT * FROM (
    (SELECT a.job_id, a.finished_at, a.outcome, a.error_code, j.type, j.queue
     FROM job_attempts a JOIN jobs j ON j.id = a.job_id
     WHERE a.tenant_id = %(tenant_id)s AND a.finished_at >= %(since)s::timestamptz
       AND a.outcome IN ('retryable', 'dead', 'lease_expired')
     ORDER BY a.finished_at DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT a.job_id, a.finished_at, a.outcome, a.error_code, j.type, j.queue
     FROM job_attempts a JOIN jobs j ON j.id = a.job_id
     WHERE a.tenant_id IS NULL AND j.tenant_id = %(tenant_id)s AND a.finished_at >= %(since)s::timestamptz
       AND a.outcome IN ('retryable', 'dead', 'lease_expired')
     ORDER BY a.finished_at DESC
     LIMIT %(limit)s)
) f
ORDER BY finished_at DESC
LIMIT %(limit)s;

-- name: metrics_history_roll_up
-- The history rollup (0094) of the buckets from %(since)s on, recomputed from
-- job_stats: per 15-minute bucket, queue and type, the outcomes summed over
-- workers and minutes and the time histogram summed cell by cell (one sum per
-- cell, as metrics_history_window).  Idempotent (the whole bucket is read
-- again), so the current bucket grows as workers flush and a late flush into
-- the previous one is taken in at the next run.  A row that did not change is
-- not written again.  The depth columns are the sampler's
-- (metrics_history_depth_sample).
INSERT INTO job_history AS j (bucket, queue, type, succeeded, retried, dead, duration_hist)
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), minute, %(origin)s::timestamptz), queue, type,
       sum(succeeded)::bigint, sum(retried)::bigint, sum(dead)::bigint,
       ARRAY[coalesce(sum(duration_hist[1]), 0), coalesce(sum(duration_hist[2]), 0), coalesce(sum(duration_hist[3]), 0), coalesce(sum(duration_hist[4]), 0), coalesce(sum(duration_hist[5]), 0), coalesce(sum(duration_hist[6]), 0), coalesce(sum(duration_hist[7]), 0), coalesce(sum(duration_hist[8]), 0), coalesce(sum(duration_hist[9]), 0), coalesce(sum(duration_hist[10]), 0), coalesce(sum(duration_hist[11]), 0), coalesce(sum(duration_hist[12]), 0), coalesce(sum(duration_hist[13]), 0), coalesce(sum(duration_hist[14]), 0), coalesce(sum(duration_hist[15]), 0), coalesce(sum(duration_hist[16]), 0)]::bigint[]
FROM job_stats WHERE minute >= %(since)s::timestamptz
GROUP BY 1, 2, 3
ON CONFLICT (bucket, queue, type) DO UPDATE
SET succeeded = excluded.succeeded, retried = excluded.retried, dead = excluded.dead,
    duration_hist = excluded.duration_hist
WHERE (j.succeeded, j.retried, j.dead, j.duration_hist)
      IS DISTINCT FROM (excluded.succeeded, excluded.retried, excluded.dead, excluded.duration_hist);

-- name: metrics_history_depth_sample
-- One depth sample per queue and type from the depth fold's totals (a few
-- rows, whatever the backlog): the minute's row for the one-hour charts and
-- the bucket's (peak of waiting jobs, dead jobs at the latest sample).
WITH totals AS (
    SELECT queue, type,
           coalesce(sum(jobs) FILTER (WHERE status IN ('pending', 'retryable')), 0)::bigint AS waiting,
           coalesce(sum(jobs) FILTER (WHERE status = 'dead'), 0)::bigint AS dead_jobs
    FROM queue_depth_totals GROUP BY queue, type),
minutes AS (
    INSERT INTO job_depth_minutes AS m (minute, queue, type, waiting, dead_jobs)
    SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())), queue, type, waiting, dead_jobs FROM totals
    ON CONFLICT (minute, queue, type) DO UPDATE
    SET waiting = greatest(m.waiting, excluded.waiting), dead_jobs = excluded.dead_jobs
    RETURNING 1)
INSERT INTO job_history AS j (bucket, queue, type, waiting, dead_jobs)
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), coalesce(%(now)s::timestamptz, now()), %(origin)s::timestamptz),
       queue, type, waiting, dead_jobs
FROM totals
ON CONFLICT (bucket, queue, type) DO UPDATE
SET waiting = greatest(j.waiting, excluded.waiting), dead_jobs = excluded.dead_jobs;

-- name: metrics_history_prune
-- History older than its retention: the 15-minute rollup after %(keep_days)s
-- days, the per-minute depth after two.
WITH minutes AS (
    DELETE FROM job_depth_minutes
    WHERE minute < coalesce(%(now)s::timestamptz, now()) - interval '2 days' RETURNING 1)
DELETE FROM job_history WHERE bucket < coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(keep_days)s);

-- name: metrics_history_window
-- The charts of 24 hours and 7 days: the rollup's rows since %(since)s summed
-- per chart bucket of %(bucket_minutes)s minutes (a whole number of the
-- rollup's 15), queue and type, optionally of one queue (%(queue)s) or one
-- type of it (%(type)s).  The window's rows only (the primary key leads with
-- the bucket): 96 or 672 per queue and type, whatever the number of jobs.
-- The histograms are summed cell by cell with one sum per cell (the 16 of
-- opsboard.metrics.DURATION_BUCKETS_MS and the overflow; test_history_charts
-- checks the count): unnesting every cell of every row cost a week's chart
-- several times more, and summing them in Python more still.  Each cell is
-- summed as an integer (a 15-minute bucket's cell is far below 2^31): a sum of
-- bigint accumulates in numeric, 4x slower for a week (16.6 -> 3.9 ms).
SELECT date_bin(make_interval(mins => %(bucket_minutes)s), bucket, %(origin)s::timestamptz) AS bucket, queue, type,
       sum(succeeded + retried + dead)::bigint AS processed, sum(retried + dead)::bigint AS failed,
       max(waiting) AS waiting,
       ARRAY[sum(duration_hist[1]::int), sum(duration_hist[2]::int), sum(duration_hist[3]::int), sum(duration_hist[4]::int), sum(duration_hist[5]::int), sum(duration_hist[6]::int), sum(duration_hist[7]::int), sum(duration_hist[8]::int), sum(duration_hist[9]::int), sum(duration_hist[10]::int), sum(duration_hist[11]::int), sum(duration_hist[12]::int), sum(duration_hist[13]::int), sum(duration_hist[14]::int), sum(duration_hist[15]::int), sum(duration_hist[16]::int)]::bigint[] AS hist
FROM job_history
WHERE bucket >= %(since)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(type)s::text IS NULL OR type = %(type)s)
GROUP BY 1, 2, 3;

-- name: metrics_history_depth_minutes
-- The one-hour charts' depth: waiting jobs per minute, queue and type since %(since)s.
SELECT minute AS bucket, queue, type, waiting
FROM job_depth_minutes
WHERE minute >= %(since)s::timestamptz
  AND (%(queue)s::text IS NULL OR queue = %(queue)s) AND (%(type)s::text IS NULL OR type = %(type)s);
