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
-- One run inside a tenant scope, with its tenant's slug and name.
SELECT r.*, t.slug AS tenant_slug, t.name AS tenant_name
FROM report_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE r.id = %(id)s AND (%(scope_all)s OR r.tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: report_run_lock
-- One run, locked: planning and assembly serialize on it.
SELECT * FROM report_runs WHERE id = %(id)s FOR UPDATE;

-- name: report_run_list
-- The newest runs inside a tenant scope (optionally one tenant), with their tenant.
SELECT r.*, t.slug AS tenant_slug, t.name AS tenant_name
FROM report_runs r JOIN tenants t ON t.id = r.tenant_id
WHERE (%(scope_all)s OR r.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(tenant_id)s::uuid IS NULL OR r.tenant_id = %(tenant_id)s::uuid)
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: report_run_set_planned
-- The request job planned the run: its chunk count, and it is running.
UPDATE report_runs
SET total_chunks = %(total)s, status = 'running',
    started_at = coalesce(started_at, coalesce(%(now)s::timestamptz, now()))
WHERE id = %(id)s AND total_chunks IS NULL
RETURNING *;

-- name: report_run_mark_assemble
-- Claim the one right to enqueue the assemble job: true for exactly one caller.
UPDATE report_runs SET assemble_enqueued_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND assemble_enqueued_at IS NULL AND done_chunks = total_chunks
RETURNING id;

-- name: report_run_count_chunk
-- The atomic counter: one finished chunk (counted once) adds its rows.  The
-- row lock on the run serializes concurrent chunks, so exactly one of them
-- reads done_chunks = total_chunks.
UPDATE report_runs
SET done_chunks = done_chunks + 1, row_count = row_count + %(rows)s
WHERE id = %(id)s
RETURNING done_chunks, total_chunks;

-- name: report_run_set_ready
-- Assembly finished: the CSV is stored under storage_key.
UPDATE report_runs
SET status = 'ready', storage_key = %(storage_key)s, byte_size = %(byte_size)s,
    failed_job_id = NULL, error_code = NULL, finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status <> 'ready'
RETURNING *;

-- name: report_run_resume
-- A replayed job runs again: the run is running again unless another chunk is still failed.
UPDATE report_runs r
SET status = 'running', failed_job_id = NULL, error_code = NULL, finished_at = NULL
WHERE r.id = %(id)s AND r.status = 'failed'
  AND NOT EXISTS (SELECT 1 FROM report_chunks c WHERE c.run_id = r.id AND c.status = 'failed')
RETURNING id;

-- name: report_chunk_insert
-- One planned slice (idempotent per run + slice).
INSERT INTO report_chunks (run_id, seq, lower_bound, upper_bound, est_rows)
VALUES (%(run_id)s, %(seq)s, %(lower)s, %(upper)s, %(est_rows)s)
ON CONFLICT (run_id, seq) DO NOTHING;

-- name: report_chunk_get
-- One chunk of a run.
SELECT * FROM report_chunks WHERE run_id = %(run_id)s AND seq = %(seq)s;

-- name: report_chunk_reopen
-- A replayed chunk job takes over a failed chunk.
UPDATE report_chunks SET status = 'pending', job_id = %(job_id)s
WHERE run_id = %(run_id)s AND seq = %(seq)s AND status = 'failed';

-- name: report_chunk_finish
-- A chunk's partial CSV is stored: done, once (a retry of a done chunk changes nothing).
UPDATE report_chunks
SET status = 'done', row_count = %(rows)s, part_key = %(part_key)s, job_id = %(job_id)s,
    finished_at = coalesce(%(now)s::timestamptz, now())
WHERE run_id = %(run_id)s AND seq = %(seq)s AND status <> 'done'
RETURNING seq;

-- name: report_chunk_list
-- Every chunk of a run, in order (assembly reads the parts in this order).
SELECT * FROM report_chunks WHERE run_id = %(run_id)s ORDER BY seq;

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
