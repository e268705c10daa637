-- name: dashboard_job_list
-- One page of the job list, newest first: filters, text search, keyset on id.
--
-- Run unprepared (see opsboard.dashboard._rows) so that every "(param IS NULL
-- OR ...)" folds away at plan time and each filter can use its index: the
-- primary key for the plain list and for time ranges (UUIDv7 ids sort by
-- creation, so created_at bounds become id bounds with a slack for clock skew
-- between hosts), jobs_tenant_idx, jobs_status_listed_idx, jobs_running_idx, jobs_dead_idx,
-- jobs_correlation_idx.  The planner cannot know that the newest jobs are the
-- waiting ones (a backlog is the newest work), so for a status or an error code
-- it would walk the primary key past all of them: opsboard.dashboard.list_jobs
-- then leads the ORDER BY with that column (equal on every row, so the order is
-- the same), which only jobs_status_listed_idx / jobs_error_code_idx provide.  The search first gathers the matching ids from the
-- two trigram indexes (where pg_trgm exists; attempt details through the
-- normalized detail_search column of 0014, the term normalized the same way), then fetches those rows by
-- primary key: "= ANY(ARRAY(...))" keeps the planner from walking the whole
-- table backwards testing each row against the matches, which an IN (...)
-- invites (it guesses that half the rows match).  The attempts searched are
-- those finished in [%(detail_since)s, %(detail_until)s) (the BRIN index on
-- finished_at beside the trigram index): every match's heap page is read, so
-- the window bounds the cost (opsboard.dashboard.SEARCH_DETAIL_WINDOW, the
-- newest part of the filter's own time range when one is set: one window at a
-- time).  opsboard.dashboard turns the test into one the
-- trigram index cannot serve: the planner, guessing one match, read the
-- trigram index's every match (the whole table's) and filtered them by time;
-- the BRIN range alone reads the window's attempts and nothing older (coalesce:
-- a strict test would let the partial trigram index stand for "IS NOT NULL",
-- a read of the whole index).  Error codes are matched
-- apart (dashboard_error_codes_matching, then this query once per code).
-- A search for the beginning of a job id is a primary-key range instead
-- (%(id_from)s..%(id_to)s, opsboard.dashboard.id_prefix_range).
-- Never OFFSET: the cursor is the last id shown.
SELECT j.id, j.type, j.version, j.tenant_id, t.slug AS tenant_slug, j.queue, j.priority, j.status,
       j.attempts, j.max_attempts, j.last_error_code, j.correlation_id, j.replay_of, j.available_at,
       j.created_at, j.started_at, j.finished_at
FROM jobs j
JOIN tenants t ON t.id = j.tenant_id
WHERE (%(scope_all)s OR j.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(type)s::text IS NULL OR j.type = %(type)s)
  AND (%(tenant_id)s::uuid IS NULL OR j.tenant_id = %(tenant_id)s)
  AND (%(status)s::job_status IS NULL OR j.status = %(status)s)
  AND (%(error_code)s::text IS NULL OR j.last_error_code = %(error_code)s)
  AND (%(correlation_id)s::text IS NULL OR j.correlation_id = %(correlation_id)s)
  AND (%(event_id)s::uuid IS NULL OR j.event_id = %(event_id)s)
  AND (%(since)s::timestamptz IS NULL OR (j.id >= %(since_id)s::uuid AND j.created_at >= %(since)s))
  AND (%(until)s::timestamptz IS NULL OR (j.id < %(until_id)s::uuid AND j.created_at < %(until)s))
  AND (%(pattern)s::text IS NULL OR j.id = ANY(ARRAY(
          SELECT a.job_id FROM job_attempts a
          WHERE a.detail_search ILIKE %(pattern)s  -- detail_search_test
            AND a.finished_at >= %(detail_since)s::timestamptz
            AND (%(detail_until)s::timestamptz IS NULL OR a.finished_at < %(detail_until)s))))
  AND (%(id_from)s::uuid IS NULL OR j.id BETWEEN %(id_from)s AND %(id_to)s::uuid)
  AND (%(before)s::uuid IS NULL OR j.id < %(before)s)
ORDER BY j.id DESC
LIMIT %(limit)s;

-- name: dashboard_error_codes_matching
-- The distinct error codes that contain the search term (%(pattern)s, an
-- ILIKE pattern), read by skipping through jobs_error_code_idx one code at a
-- time: one probe per distinct code, however many jobs carry each (the
-- trigram index on jobs read every matching job's heap page instead).
WITH RECURSIVE c AS (
    (SELECT last_error_code AS code FROM jobs WHERE last_error_code IS NOT NULL ORDER BY last_error_code LIMIT 1)
    UNION ALL
    SELECT (SELECT j.last_error_code FROM jobs j WHERE j.last_error_code > c.code
            ORDER BY j.last_error_code LIMIT 1)
    FROM c WHERE c.code IS NOT NULL
)
SELECT code FROM c WHERE code IS NOT NULL AND code ILIKE %(pattern)s
LIMIT %(limit)s;

-- name: dashboard_job_get
-- One job inside a scope, with its tenant and the resolution recorded for it; expired: past its
-- expires_at by the database's clock (a dead one is not replayed then: jobqueue.replay).
SELECT j.*, t.slug AS tenant_slug, t.name AS tenant_name, coalesce(j.expires_at <= now(), false) AS expired,
       r.resolution, r.reason AS resolution_reason, r.actor AS resolution_actor, r.actor_id AS resolution_actor_id,
       r.at AS resolution_at
FROM jobs j
JOIN tenants t ON t.id = j.tenant_id
LEFT JOIN job_resolutions r ON r.job_id = j.id
WHERE j.id = %(id)s AND (%(scope_all)s OR j.tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: dashboard_job_replays
-- The jobs that replay a job (a dead job can be replayed more than once over
-- time): those it created (replay_of) and the live jobs that held its
-- idempotency key when it was replayed (job_replay_links).
-- Two index lookups (jobs_replay_of_idx, the links' key) joined by primary key:
-- "replay_of = id OR id IN (...)" could use neither and read the whole table
-- for every job page (`opsboard bench --scenario scale`).
SELECT id, status, created_at, finished_at, last_error_code
FROM jobs
WHERE id IN (SELECT r.id FROM jobs r WHERE r.replay_of = %(id)s
             UNION
             SELECT l.job_id FROM job_replay_links l WHERE l.dead_job_id = %(id)s)
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY id;

-- name: dashboard_dead_groups
-- Dead letters grouped by (type, last error code), over the newest
-- %(window)s dead jobs inside the scope and filters (dead jobs are kept until
-- resolved or replayed, so counting every dead job ever kept grew without
-- bound).  "Open" dead jobs are neither resolved/ignored
-- nor replayed yet: at most three index probes per row of the window.  Every group of
-- the window is returned, with its oldest failure; the caller drops the groups
-- with none open unless asked and tells how far back the window reaches.
-- Newest first by id through jobs_dead_recent_idx, or jobs_dead_tenant_recent_idx
-- when one tenant bounds it (opsboard.dashboard.dead_letter_groups leads the
-- ORDER BY with the tenant then, as the job list does): index-only scans (0049).
WITH win AS MATERIALIZED (
    SELECT j.id, j.type, j.last_error_code, j.finished_at, j.queue, j.tenant_id
    FROM jobs j
    WHERE j.status = 'dead'
      AND (%(scope_all)s OR j.tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR j.tenant_id = %(tenant_id)s)
    ORDER BY j.id DESC
    LIMIT %(window)s
), dead AS MATERIALIZED (
    -- Scalar subqueries with LIMIT: one index probe each per row (a hashed
    -- NOT EXISTS would read every resolution ever written), evaluated once per
    -- row (MATERIALIZED: not again in each aggregate).
    SELECT w.*,
           (SELECT 1 FROM job_resolutions r WHERE r.job_id = w.id LIMIT 1) IS NULL
           AND (SELECT 1 FROM jobs p WHERE p.replay_of = w.id LIMIT 1) IS NULL
           AND (SELECT 1 FROM job_replay_links l WHERE l.dead_job_id = w.id LIMIT 1) IS NULL AS open
    FROM win w
)
SELECT type, last_error_code,
       count(*) AS total,
       count(*) FILTER (WHERE open) AS open,
       max(finished_at) AS newest,
       max(finished_at) FILTER (WHERE open) AS newest_open,
       min(finished_at) AS oldest,
       array_agg(DISTINCT queue ORDER BY queue) AS queues,
       count(DISTINCT tenant_id) AS tenants
FROM dead
GROUP BY type, last_error_code
ORDER BY coalesce(max(finished_at) FILTER (WHERE open), max(finished_at)) DESC NULLS LAST, type, last_error_code;

-- name: job_resolution_insert
-- Record the decision about a dead job; nothing when one exists already.
INSERT INTO job_resolutions (job_id, resolution, reason, actor, actor_id)
VALUES (%(job_id)s, %(resolution)s, %(reason)s, %(actor)s, %(actor_id)s)
ON CONFLICT (job_id) DO NOTHING
RETURNING *;

-- name: job_resolution_get
-- The decision recorded about a job.
SELECT * FROM job_resolutions WHERE job_id = %(job_id)s;

-- name: dashboard_tenant_options
-- Tenants for the filter menus, inside a scope.
SELECT id, slug, name FROM tenants
WHERE (%(scope_all)s OR id = ANY(%(scope_ids)s::uuid[]))
ORDER BY slug
LIMIT 500;

-- name: dashboard_worker_list
-- Live worker rows with the jobs they hold (inside the caller's scope).  A
-- worker silent for longer than stale_seconds is flagged stale; the pruner
-- forgets it much later.  Running jobs are few: the lateral reads the
-- partial jobs_running_idx.
SELECT w.id, w.hostname, w.pid, w.queues, w.version, w.state, w.is_leader, w.running_jobs AS reported_running,
       w.abandoned_threads,
       w.started_at, w.last_seen_at,
       w.last_seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(stale_seconds)s) AS stale,
       greatest(0, extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - w.last_seen_at))::float8 AS seen_ago,
       r.n AS running_count, r.jobs AS running
FROM workers w
CROSS JOIN LATERAL (
    SELECT count(*) AS n,
           coalesce(jsonb_agg(jsonb_build_object('id', x.id, 'type', x.type, 'started_at', x.started_at)
                              ORDER BY x.id) FILTER (WHERE x.rn <= %(jobs_per_worker)s), '[]'::jsonb) AS jobs
    FROM (SELECT j.id, j.type, j.started_at, row_number() OVER (ORDER BY j.id) AS rn
          FROM jobs j
          WHERE j.status = 'running' AND j.locked_by = w.id
            AND (%(scope_all)s OR j.tenant_id = ANY(%(scope_ids)s::uuid[]))) x
) r
ORDER BY w.hostname, w.id;

-- name: dashboard_group_active
-- Unfinished jobs of one ordered group, oldest first (jobs_group_idx).
SELECT id, type, status::text AS status, created_at FROM jobs
WHERE tenant_id = %(tenant_id)s AND group_key = %(group_key)s
  AND status IN ('pending', 'running', 'retryable')
ORDER BY id LIMIT 20;

-- name: dashboard_group_dead_before
-- Earlier jobs of the group that died: the group moved on past them.
SELECT id, type, last_error_code, finished_at FROM jobs
WHERE tenant_id = %(tenant_id)s AND group_key = %(group_key)s AND status = 'dead' AND id < %(id)s
ORDER BY id DESC LIMIT 20;

-- name: dashboard_top_error_codes
-- The error codes of the newest %(window)s failed attempts since %(since)s, per
-- type and queue, over every tenant: a backward range of job_attempts_failed_idx
-- (0050), then each attempt's job by primary key for its type and queue.  All
-- of the hour's failures were read and joined before, a cost that grew with the
-- failure rate; "oldest" says how far back the window reached.
SELECT r.error_code, j.type, j.queue, count(*) AS failures, count(*) FILTER (WHERE r.outcome = 'dead') AS dead,
       min(r.finished_at) AS oldest
FROM (SELECT a.job_id, a.error_code, a.outcome, a.finished_at FROM job_attempts a
      WHERE a.finished_at >= %(since)s::timestamptz
        AND a.outcome IN ('retryable', 'dead', 'lease_expired') AND a.error_code IS NOT NULL
      ORDER BY a.finished_at DESC
      LIMIT %(window)s) r
JOIN jobs j ON j.id = r.job_id
GROUP BY r.error_code, j.type, j.queue;

-- name: dashboard_top_error_codes_scoped
-- The same inside a tenant scope: the scope's tenants' newest failed attempts
-- through job_attempts_tenant_failed_idx (0050); attempts without a tenant
-- (written before 0050, or by a worker of the previous release: under NULL in
-- that index) kept through their job.
SELECT r.error_code, j.type, j.queue, count(*) AS failures, count(*) FILTER (WHERE r.outcome = 'dead') AS dead,
       min(r.finished_at) AS oldest
FROM (SELECT * FROM (
        (SELECT a.job_id, a.error_code, a.outcome, a.finished_at FROM job_attempts a
         WHERE a.tenant_id = ANY(%(scope_ids)s::uuid[]) AND a.finished_at >= %(since)s::timestamptz
           AND a.outcome IN ('retryable', 'dead', 'lease_expired') AND a.error_code IS NOT NULL
         ORDER BY a.finished_at DESC
         LIMIT %(window)s)
        UNION ALL
        (SELECT a.job_id, a.error_code, a.outcome, a.finished_at FROM job_attempts a JOIN jobs o ON o.id = a.job_id
         WHERE a.tenant_id IS NULL AND o.tenant_id = ANY(%(scope_ids)s::uuid[])
           AND a.finished_at >= %(since)s::timestamptz
           AND a.outcome IN ('retryable', 'dead', 'lease_expired') AND a.error_code IS NOT NULL
         ORDER BY a.finished_at DESC
         LIMIT %(window)s)) u
      ORDER BY finished_at DESC
      LIMIT %(window)s) r
JOIN jobs j ON j.id = r.job_id
GROUP BY r.error_code, j.type, j.queue;

-- name: dashboard_replay_preview
-- A bulk replay's confirmation: the open dead jobs it would take (as
-- job_dead_select finds them), counted up to %(cap)s only: each is three
-- index probes for "open", and a common filter at ten million jobs matched
-- far more dead jobs than a request replays (and counted them twice); of those counted, how many died
-- before using their attempts (a permanent error: replaying repeats it unless
-- something changed); and the filter's tenant by name.  A dead job past its
-- expires_at is not counted: it is not replayed.
SELECT count(*) AS matched, count(*) FILTER (WHERE attempts < max_attempts) AS permanent,
       (SELECT name FROM tenants WHERE id = %(tenant_id)s::uuid
          AND (%(scope_all)s OR id = ANY(%(scope_ids)s::uuid[]))) AS tenant_name
FROM (SELECT attempts, max_attempts FROM jobs
      WHERE status = 'dead'
        AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
        AND (%(type)s::text IS NULL OR type = %(type)s)
        AND (%(queue)s::text IS NULL OR queue = %(queue)s)
        AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
        AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
        AND (expires_at IS NULL OR expires_at > now())
        AND NOT EXISTS (SELECT 1 FROM job_resolutions r WHERE r.job_id = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM job_replay_links l WHERE l.dead_job_id = jobs.id)
      LIMIT %(cap)s) m;
