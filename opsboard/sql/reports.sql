-- name: report_run_insert
-- A new report run (status queued); with a source key already used by the tenant, nothing.
INSERT INTO report_runs (id, tenant_id, kind, params, requested_by, requested_label, source_key)
VALUES (%(id)s, %(tenant_id)s, %(kind)s, %(params)s, %(requested_by)s, %(requested_label)s, %(source_key)s)
ON CONFLICT (tenant_id, source_key) WHERE source_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: report_run_get_by_source
-- The run a schedule slot made for a tenant.
SELECT * FROM report_runs WHERE tenant_id = %(tenant_id)s AND source_key = %(source_key)s;

-- name: report_run_get
-- One run inside a tenant scope, with its tenant's slug and name and its chunks done (its workflow's).
-- (The columns by name: done_chunks and assemble_enqueued_at are the previous release's, unused: 0090.)
SELECT r.id, r.tenant_id, r.kind, r.params, r.requested_by, r.requested_label, r.source_key, r.status, r.total_chunks,
       r.row_count, r.storage_key, r.byte_size, r.failed_job_id, r.error_code, r.created_at, r.started_at,
       r.finished_at, r.workflow_id,
       t.slug AS tenant_slug, t.name AS tenant_name, coalesce(p.done_chunks, 0) AS done_chunks,
       p.workflow_cancelled_at
FROM report_runs r JOIN tenants t ON t.id = r.tenant_id
LEFT JOIN LATERAL (
    -- Progress from the run's workflow (migration 0090): its chunk tasks done.
    SELECT count(*) FILTER (WHERE wt.state = 'succeeded' AND wt.name <> 'assemble') AS done_chunks,
           min(w.cancelled_at) AS workflow_cancelled_at
    FROM workflows w JOIN workflow_tasks wt ON wt.workflow_id = w.id
    WHERE w.id = r.workflow_id
) p ON true
WHERE r.id = %(id)s AND (%(scope_all)s OR r.tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: report_run_lock
-- One run, locked: planning and assembly serialize on it.
SELECT * FROM report_runs WHERE id = %(id)s FOR UPDATE;

-- name: report_run_list
-- The newest runs inside a tenant scope (optionally one tenant), with their tenant and chunks done.
SELECT r.id, r.tenant_id, r.kind, r.params, r.requested_by, r.requested_label, r.source_key, r.status, r.total_chunks,
       r.row_count, r.storage_key, r.byte_size, r.failed_job_id, r.error_code, r.created_at, r.started_at,
       r.finished_at, r.workflow_id,
       t.slug AS tenant_slug, t.name AS tenant_name, coalesce(p.done_chunks, 0) AS done_chunks,
       p.workflow_cancelled_at
FROM report_runs r JOIN tenants t ON t.id = r.tenant_id
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE wt.state = 'succeeded' AND wt.name <> 'assemble') AS done_chunks,
           min(w.cancelled_at) AS workflow_cancelled_at
    FROM workflows w JOIN workflow_tasks wt ON wt.workflow_id = w.id
    WHERE w.id = r.workflow_id
) p ON true
WHERE (%(scope_all)s OR r.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(tenant_id)s::uuid IS NULL OR r.tenant_id = %(tenant_id)s::uuid)
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: report_run_set_planned
-- The request job planned the run into its workflow: the chunk count, and it is running.
UPDATE report_runs
SET total_chunks = %(total)s, workflow_id = %(workflow_id)s, status = 'running',
    failed_job_id = NULL, error_code = NULL, finished_at = NULL,
    started_at = coalesce(started_at, coalesce(%(now)s::timestamptz, now()))
WHERE id = %(id)s AND workflow_id IS NULL
RETURNING *;

-- name: report_run_set_ready
-- Assembly finished: the CSV is stored under storage_key, with the rows of every chunk.
UPDATE report_runs
SET status = 'ready', storage_key = %(storage_key)s, byte_size = %(byte_size)s, row_count = %(rows)s,
    failed_job_id = NULL, error_code = NULL, finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status <> 'ready'
RETURNING *;

-- name: report_run_resume
-- A replayed job runs again: the run is running again unless another of its tasks is still dead.
UPDATE report_runs r
SET status = 'running', failed_job_id = NULL, error_code = NULL, finished_at = NULL
WHERE r.id = %(id)s AND r.status = 'failed'
  AND NOT EXISTS (SELECT 1 FROM workflow_tasks t WHERE t.workflow_id = r.workflow_id AND t.state = 'dead')
RETURNING id;

-- name: report_chunk_list
-- Every chunk of a run, in order: its workflow's chunk tasks, each slice's bounds from its payload,
-- its rows and part from its recorded result, its state as a chunk's (pending, done, failed).
SELECT (t.payload ->> 'seq')::int AS seq, t.payload -> 'lower' AS lower_bound, t.payload -> 'upper' AS upper_bound,
       (t.payload ->> 'est_rows')::bigint AS est_rows,
       CASE t.state WHEN 'succeeded' THEN 'done' WHEN 'dead' THEN 'failed' WHEN 'cancelled' THEN 'failed'
                    ELSE 'pending' END AS status,
       (j.result ->> 'rows')::bigint AS row_count, j.result ->> 'part_key' AS part_key, t.job_id, t.finished_at
FROM report_runs r JOIN workflow_tasks t ON t.workflow_id = r.workflow_id AND t.name <> 'assemble'
LEFT JOIN jobs j ON j.id = t.job_id
WHERE r.id = %(run_id)s
ORDER BY seq;

-- name: report_activity_plan
-- Tenant job activity, planning: source rows per (day, type) in key order.
-- The id range (UUIDv7, time-ordered, a day of slack) lets jobs_tenant_idx
-- find the tenant's rows; created_at decides exactly.
SELECT (j.created_at AT TIME ZONE %(tz)s)::date AS day, j.type, count(*) AS n
FROM jobs j
WHERE j.tenant_id = %(tenant_id)s AND j.id >= %(id_from)s AND j.id < %(id_to)s
  AND j.created_at >= %(t_from)s AND j.created_at < %(t_to)s
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: report_activity_rows
-- Tenant job activity, one slice: jobs per day, type and status for keys in
-- [lower, upper) (upper NULL: to the end), in key order.
SELECT (j.created_at AT TIME ZONE %(tz)s)::date AS day, j.type, j.status::text AS status, count(*) AS jobs
FROM jobs j
WHERE j.tenant_id = %(tenant_id)s AND j.id >= %(id_from)s AND j.id < %(id_to)s
  AND j.created_at >= %(t_from)s AND j.created_at < %(t_to)s
  AND ((j.created_at AT TIME ZONE %(tz)s)::date, j.type) >= (%(lo_day)s::date, %(lo_type)s::text)
  AND (%(hi_day)s::date IS NULL
       OR ((j.created_at AT TIME ZONE %(tz)s)::date, j.type) < (%(hi_day)s::date, %(hi_type)s::text))
GROUP BY 1, 2, j.status
ORDER BY 1, 2, j.status;
