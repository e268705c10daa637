-- name: metrics_depth_by_queue_type
-- Sampled depth per queue, type and status inside a tenant scope, with the oldest ready job.
SELECT queue, type, status::text AS status, sum(jobs)::bigint AS jobs, min(oldest_ready) AS oldest_ready,
       max(sampled_at) AS sampled_at
FROM queue_depth
WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
GROUP BY queue, type, status;

-- name: metrics_depth_by_tenant
-- Sampled depth per tenant and status inside a scope, with the oldest ready job.
SELECT d.tenant_id, t.slug, t.name, t.weight, d.status::text AS status, sum(d.jobs)::bigint AS jobs,
       min(d.oldest_ready) AS oldest_ready
FROM queue_depth d JOIN tenants t ON t.id = d.tenant_id
WHERE (%(scope_all)s OR d.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(tenant_id)s::uuid IS NULL OR d.tenant_id = %(tenant_id)s)
GROUP BY d.tenant_id, t.slug, t.name, t.weight, d.status;

-- name: metrics_depth_by_tenant_queue_type
-- One tenant's sampled depth per queue, type and status.
SELECT queue, type, status::text AS status, jobs, oldest_ready
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
SELECT id, hostname, pid, queues, state, is_leader, running_jobs, started_at, last_seen_at,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - last_seen_at) AS silent_seconds
FROM workers ORDER BY started_at;
