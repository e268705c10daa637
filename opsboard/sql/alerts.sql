-- name: alert_dead_recent
-- Dead jobs that finished inside the window ending at now, with the types that
-- contributed most (jobs_dead_finished_idx: dead rows only).
WITH recent AS (
    SELECT type FROM jobs
    WHERE status = 'dead'
      AND finished_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
      AND finished_at <= coalesce(%(now)s::timestamptz, now())
)
SELECT (SELECT count(*) FROM recent) AS n,
       coalesce((SELECT jsonb_object_agg(type, c) FROM (
                    SELECT type, count(*) AS c FROM recent GROUP BY type ORDER BY count(*) DESC, type LIMIT 5) top),
                '{}'::jsonb) AS top_types;

-- name: alert_error_code_spread
-- Error codes that many different jobs failed with inside the window: jobs
-- now retryable or dead whose last error is that code and that failed with it
-- recently (attempt rows; job_attempts_finished_brin bounds the scan).
SELECT a.error_code, count(DISTINCT a.job_id) AS jobs,
       count(DISTINCT j.type) AS types, max(a.finished_at) AS newest
FROM job_attempts a
JOIN jobs j ON j.id = a.job_id
WHERE a.finished_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND a.finished_at <= coalesce(%(now)s::timestamptz, now())
  AND a.outcome IN ('retryable', 'dead', 'lease_expired')
  AND a.error_code IS NOT NULL
  AND j.status IN ('retryable', 'dead')
  AND j.last_error_code = a.error_code
GROUP BY a.error_code
HAVING count(DISTINCT a.job_id) >= %(threshold)s
ORDER BY count(DISTINCT a.job_id) DESC, a.error_code;

-- name: alert_queue_readiness
-- Per queue: the oldest ready job's available_at, and how many workers that
-- serve the queue were seen recently.
--
-- The ready index is (queue, tenant_id, priority, available_at, id)
-- (migration 0003): a plain min(available_at) per queue would read every
-- ready entry of a deep backlog.  Instead a loose index scan visits each
-- (tenant, priority) of the queue once: the first entry of each is that
-- pair's oldest job, found by one index probe, and the next pair is the first
-- entry past it.  The cost grows with tenants x priorities, not with jobs.
WITH RECURSIVE walk AS (
    SELECT f.queue, f.tenant_id, f.priority, f.available_at
    FROM unnest(%(queues)s::text[]) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT j.queue, j.tenant_id, j.priority, j.available_at FROM jobs j
        WHERE j.queue = q.queue AND j.status IN ('pending', 'retryable')
        ORDER BY j.queue, j.tenant_id, j.priority, j.available_at
        LIMIT 1) f
  UNION ALL
    SELECT n.queue, n.tenant_id, n.priority, n.available_at
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT j.queue, j.tenant_id, j.priority, j.available_at FROM jobs j
        WHERE j.queue = w.queue AND j.status IN ('pending', 'retryable')
          AND (j.tenant_id, j.priority) > (w.tenant_id, w.priority)
        ORDER BY j.queue, j.tenant_id, j.priority, j.available_at
        LIMIT 1) n
), oldest AS (
    SELECT queue, min(available_at) AS available_at FROM walk GROUP BY queue
)
SELECT q.queue,
       o.available_at AS oldest_ready_at,
       CASE WHEN o.available_at <= coalesce(%(now)s::timestamptz, now())
            THEN extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - o.available_at)::float8 END AS oldest_age,
       (SELECT count(*) FROM workers w
         WHERE w.queues ? q.queue AND w.state = 'running'
           AND w.last_seen_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(worker_seconds)s)
       ) AS live_workers
FROM unnest(%(queues)s::text[]) AS q(queue)
LEFT JOIN oldest o ON o.queue = q.queue
ORDER BY q.queue;

-- name: alert_upsert
-- Open an alert, or refresh the open one with the same rule and key.
-- inserted is true when this opened a new alert (xmax = 0 on a fresh row).
INSERT INTO alerts (id, rule, key, tenant_id, severity, summary, details, opened_at, last_seen_at)
VALUES (%(id)s, %(rule)s, %(key)s, %(tenant_id)s, %(severity)s, %(summary)s, %(details)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (rule, key) WHERE closed_at IS NULL DO UPDATE
SET last_seen_at = excluded.last_seen_at, severity = excluded.severity, summary = excluded.summary,
    details = excluded.details
RETURNING *, (xmax = 0) AS inserted;

-- name: alert_close_cleared
-- Close the open alerts of the evaluated rules whose (rule, key) is not firing any more.
UPDATE alerts a SET closed_at = greatest(coalesce(%(now)s::timestamptz, now()), a.opened_at)
WHERE a.closed_at IS NULL
  AND a.rule = ANY(%(rules)s::text[])
  AND NOT EXISTS (SELECT 1 FROM unnest(%(firing_rules)s::text[], %(firing_keys)s::text[]) AS f(rule, key)
                  WHERE f.rule = a.rule AND f.key = a.key)
RETURNING *;

-- name: alert_list_open
-- Open alerts inside a scope: unacknowledged first, then by severity and age.
SELECT * FROM alerts
WHERE closed_at IS NULL AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY acknowledged_at IS NOT NULL,
         CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
         opened_at, id;

-- name: alert_list_closed
-- Recently closed alerts inside a scope, newest first.
SELECT * FROM alerts
WHERE closed_at IS NOT NULL AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY closed_at DESC, id DESC
LIMIT %(limit)s;

-- name: alert_get
-- One alert inside a scope.
SELECT * FROM alerts WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: alert_acknowledge
-- Acknowledge an open, unacknowledged alert inside a scope.
UPDATE alerts
SET acknowledged_at = coalesce(%(now)s::timestamptz, now()), acknowledged_by = %(actor)s,
    acknowledged_by_id = %(actor_id)s, ack_reason = %(reason)s
WHERE id = %(id)s AND closed_at IS NULL AND acknowledged_at IS NULL
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
RETURNING *;

-- name: alert_count_unacknowledged
-- The banner: open alerts nobody acknowledged yet (alerts_unacked_idx).
SELECT count(*) AS n,
       count(*) FILTER (WHERE severity = 'critical') AS critical
FROM alerts
WHERE closed_at IS NULL AND acknowledged_at IS NULL
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: alert_operator_tenant
-- The tenant a platform-wide alert's event belongs to: the (oldest) operator tenant.
SELECT id FROM tenants WHERE is_operator ORDER BY created_at, id LIMIT 1;

-- name: alert_oncall_staff
-- Who is notified of an alert: active users with an active membership of an operator tenant in a
-- role that holds alerts.view (%(roles)s, from opsboard.auth.ROLE_PERMISSIONS).
SELECT DISTINCT u.id FROM memberships m JOIN tenants t ON t.id = m.tenant_id JOIN users u ON u.id = m.user_id
WHERE t.is_operator AND m.active AND u.is_active AND m.role::text = ANY(%(roles)s::text[]);
