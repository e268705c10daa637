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
-- Handler-time histograms per time bucket, queue and type (summed element-wise), for p95 per bucket.
SELECT bucket, queue, type, array_agg(total ORDER BY i) AS hist
FROM (SELECT date_bin(make_interval(mins => %(bucket_minutes)s), s.minute, %(origin)s::timestamptz) AS bucket,
             s.queue, s.type, h.i, sum(h.v)::bigint AS total
      FROM job_stats s CROSS JOIN LATERAL unnest(s.duration_hist) WITH ORDINALITY AS h(v, i)
      WHERE s.minute >= %(since)s::timestamptz
      GROUP BY 1, 2, 3, 4) x
GROUP BY bucket, queue, type;

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
