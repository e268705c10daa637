-- Bulk actions on jobs bound to what their preview saw (opsboard.jobqueue.bulk):
-- by filter (cancel waiting jobs, replay or purge dead ones), each with an
-- upper bound taken at the preview (the largest id of the jobs it counted, and
-- for dead jobs the time it looked), and on jobs picked by id (tick boxes).

-- name: bulk_waiting_count
-- How many unstarted (pending or retryable) jobs match a bulk filter, up to
-- %(cap)s (NULL: all); under %(upto)s when given (the action's check that no
-- more arrived under the preview's bound than it counted).
SELECT count(*) AS n FROM (
    SELECT 1 FROM jobs
    WHERE status IN ('pending', 'retryable')
      AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(type)s::text IS NULL OR type = %(type)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
      AND (%(status)s::text IS NULL OR status = %(status)s::job_status)
      AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s)
      AND (%(upto)s::uuid IS NULL OR id <= %(upto)s)
    LIMIT %(cap)s
) m;

-- name: bulk_waiting_bound
-- The preview's bound: the largest id among the first %(n)s matching waiting
-- jobs in id order (the ones a cancel of %(n)s takes).  UUIDv7 ids grow with
-- time, so a job enqueued after the preview is above it.
WITH m AS (
    SELECT id FROM jobs
    WHERE status IN ('pending', 'retryable')
      AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(type)s::text IS NULL OR type = %(type)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
      AND (%(status)s::text IS NULL OR status = %(status)s::job_status)
      AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s)
    ORDER BY id
    LIMIT %(n)s
)
SELECT (SELECT id FROM m ORDER BY id DESC LIMIT 1) AS upto;

-- name: bulk_waiting_cancel
-- Cancel at most %(limit)s matching waiting jobs at or under the preview's
-- bound.  Locked and re-checked as job_cancel_matching does (SKIP LOCKED: a row
-- a claim holds is being started).  Returns exactly the jobs cancelled.
WITH picked AS (
    SELECT id FROM jobs
    WHERE status IN ('pending', 'retryable')
      AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(type)s::text IS NULL OR type = %(type)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
      AND (%(status)s::text IS NULL OR status = %(status)s::job_status)
      AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s)
      AND id <= %(upto)s::uuid
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now())
FROM picked
WHERE j.id = picked.id AND j.status IN ('pending', 'retryable')
RETURNING j.id, j.tenant_id, j.type, j.version, j.queue;

-- name: bulk_dead_select
-- Dead jobs matching a bulk filter, in id order, at most %(limit)s (the
-- preview asks for one more than it acts on, to say "1,000+" without counting
-- the rest).  %(seen_at)s bounds finished_at: a job that dies
-- after the preview is not taken even though its id (its creation) is older;
-- %(upto)s bounds the id.  open_only as job_dead_select (replay: not yet
-- replayed, resolved or ignored, and not past its expiry); purge_only: no
-- surviving job replays it (jobs.replay_of must keep naming a job), and
-- %(finished_before)s is the purge's age.
SELECT id, tenant_id FROM jobs
WHERE status = 'dead'
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
  AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s)
  AND finished_at <= coalesce(%(seen_at)s::timestamptz, now())
  AND (%(upto)s::uuid IS NULL OR id <= %(upto)s)
  AND (NOT %(open_only)s OR (
        (expires_at IS NULL OR expires_at > now())
        AND NOT EXISTS (SELECT 1 FROM job_resolutions r WHERE r.job_id = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM job_replay_links l WHERE l.dead_job_id = jobs.id)))
  AND (NOT %(purge_only)s OR NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = jobs.id))
ORDER BY id
LIMIT %(limit)s;

-- name: bulk_dead_delete
-- Delete these dead jobs (re-checked: still dead, in scope, and no surviving
-- job replays them) with their attempts; resolutions and replay links go with
-- them (migration 0045's trigger).  Returns the jobs deleted.
WITH gone AS (
    DELETE FROM jobs j
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.status = 'dead'
      AND (%(scope_all)s OR j.tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = j.id)
    RETURNING j.id, j.tenant_id, j.type, j.queue
), att AS (
    DELETE FROM job_attempts a WHERE a.job_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT id, tenant_id, type, queue FROM gone ORDER BY id;

-- name: bulk_jobs_for_update
-- Jobs picked by id (tick boxes), in the caller's scope, locked in id order:
-- the selection's action re-reads each job's status under the lock.
SELECT id, tenant_id, type, version, queue, status, available_at FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY id
FOR UPDATE;

-- name: bulk_jobs_get
-- Jobs picked by id, in the caller's scope: what a selection's confirmation shows.
SELECT id, tenant_id, type, queue, status, available_at, available_at > now() AS scheduled FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY id;

-- name: bulk_cancel_ids
-- Cancel these waiting jobs (locked by bulk_jobs_for_update first).
UPDATE jobs SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = ANY(%(ids)s::uuid[]) AND status IN ('pending', 'retryable')
RETURNING id, tenant_id, type, version, queue;

-- name: bulk_run_now
-- "Run now": scheduled (pending, not yet available) and retry-waiting jobs
-- become available at once.  The attempt count is kept: a retry run now is
-- still that retry.
UPDATE jobs SET available_at = coalesce(%(now)s::timestamptz, now())
WHERE id = ANY(%(ids)s::uuid[]) AND status IN ('pending', 'retryable')
  AND available_at > coalesce(%(now)s::timestamptz, now())
RETURNING id, tenant_id, type, queue;

-- name: bulk_dead_prune
-- The pruner's retention of dead jobs: delete up to %(limit)s dead jobs
-- finished before %(cutoff)s that no surviving job replays, with their
-- attempts; in id order from %(after_id)s (each batch resumes where the last
-- read).  Returns the number deleted, read, and the last id read.
WITH old AS (
    SELECT id FROM jobs
    WHERE id > %(after_id)s::uuid AND id < %(cutoff_id)s::uuid
      AND status = 'dead' AND finished_at < %(cutoff)s::timestamptz
    ORDER BY id
    LIMIT %(limit)s
), gone AS (
    DELETE FROM jobs j
    WHERE j.id = ANY (ARRAY(SELECT id FROM old)) AND j.status = 'dead'
      AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = j.id)
    RETURNING j.id
), att AS (
    DELETE FROM job_attempts a WHERE a.job_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM old) AS seen, (SELECT id FROM old ORDER BY id DESC LIMIT 1) AS last_id;
