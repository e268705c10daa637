-- name: job_insert
-- Enqueue one job; with an idempotency key already live, insert nothing.
-- Returns only what the database decides (the time) or converts in a way
-- Python cannot repeat exactly (jsonb's numbers: 1e16 comes back an int);
-- queue.enqueue builds the rest of the row from what it sent (RETURNING *
-- formatted, sent and parsed every column, a large share of a single
-- enqueue's producer CPU: `opsboard bench --scenario enqueue_cost`).
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
                  max_attempts, available_at, expires_at, correlation_id, event_id, replay_of, trace_context,
                  concurrency_key)
VALUES (%(id)s, %(type)s, %(version)s, %(tenant_id)s, %(queue)s, %(priority)s, %(idempotency_key)s,
        %(group_key)s, %(payload)s, %(max_attempts)s,
        coalesce(%(run_at)s::timestamptz, now()), %(expires_at)s, %(correlation_id)s, %(event_id)s, %(replay_of)s,
        %(trace_context)s, %(concurrency_key)s)
ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
DO NOTHING
RETURNING payload, created_at;

-- name: job_insert_new
-- job_insert for a job without an idempotency key: nothing can conflict
-- (jobs_idempotency_idx holds keyed jobs only, the id is new), so a plain
-- INSERT.  ON CONFLICT made every insert speculative: one more WAL record
-- (HEAP_CONFIRM) and a share of the statement's time (EXPLAIN (ANALYZE, WAL)
-- of single enqueues; docs/performance.md, enqueue).
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, group_key, payload,
                  max_attempts, available_at, expires_at, correlation_id, event_id, replay_of, trace_context,
                  concurrency_key)
VALUES (%(id)s, %(type)s, %(version)s, %(tenant_id)s, %(queue)s, %(priority)s, %(group_key)s, %(payload)s,
        %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()), %(expires_at)s, %(correlation_id)s,
        %(event_id)s, %(replay_of)s, %(trace_context)s, %(concurrency_key)s)
RETURNING payload, created_at;

-- name: job_insert_many
-- Enqueue many jobs in one statement.  %(rows)s is one JSON array of job
-- objects: a single JSON document is far cheaper to send than fourteen
-- parallel arrays (measured with `opsboard bench --scenario enqueue_many`).
INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
                  max_attempts, available_at, expires_at, correlation_id, event_id, trace_context, concurrency_key)
SELECT id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
       max_attempts, coalesce(run_at, now()), expires_at, correlation_id, event_id, trace_context, concurrency_key
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS t(id uuid, type text, version smallint, tenant_id uuid, queue text, priority smallint,
          idempotency_key text, group_key text, payload jsonb, max_attempts int, run_at timestamptz,
          expires_at timestamptz, correlation_id text, event_id uuid, trace_context text, concurrency_key text)
ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
DO NOTHING
RETURNING id;

-- name: job_trace_contexts
-- The stored trace contexts of claimed jobs (migration 0072), read by a worker with tracing on
-- only: the claim leaves the column out, so that tracing off costs nothing per job.
SELECT id, trace_context FROM jobs WHERE id = ANY(%(ids)s::uuid[]) AND trace_context IS NOT NULL;

-- name: job_get_live_by_key
-- The live job holding an idempotency key.
SELECT * FROM jobs
WHERE tenant_id = %(tenant_id)s AND type = %(type)s AND idempotency_key = %(idempotency_key)s
  AND status <> 'dead';

-- name: job_unfinished_by_key
-- Whether a job of one of %(types)s holding an idempotency key is still to run or running
-- (pending, running, retryable: not yet succeeded, dead or cancelled).
SELECT id, status FROM jobs
WHERE tenant_id = %(tenant_id)s AND type = ANY(%(types)s::text[]) AND idempotency_key = %(idempotency_key)s
  AND status IN ('pending', 'running', 'retryable')
LIMIT 1;

-- name: job_replay_link_insert
-- A dead job's replay is a live job that does not name it in replay_of (it
-- held the dead job's idempotency key already): recorded so that the dead job
-- reads as replayed (0033).
INSERT INTO job_replay_links (dead_job_id, job_id) VALUES (%(dead_job_id)s, %(job_id)s)
ON CONFLICT DO NOTHING;

-- name: job_get_by_keys
-- The job holding each of these idempotency keys, dead ones included (live
-- first, then the newest): a repeated fan-out returns them instead of making a
-- new job for a dead delivery.  Two branches so that each uses its partial index
-- (jobs_idempotency_idx for live jobs, jobs_dead_key_idx for dead ones).
SELECT DISTINCT ON (idempotency_key) * FROM (
    SELECT * FROM jobs
    WHERE tenant_id = %(tenant_id)s AND type = %(type)s AND idempotency_key = ANY(%(keys)s::text[])
      AND idempotency_key IS NOT NULL AND status <> 'dead'
    UNION ALL
    SELECT * FROM jobs
    WHERE tenant_id = %(tenant_id)s AND type = %(type)s AND idempotency_key = ANY(%(keys)s::text[])
      AND idempotency_key IS NOT NULL AND status = 'dead'
) j
ORDER BY idempotency_key, status = 'dead', created_at DESC;

-- name: job_get
-- One job by id, inside a tenant scope.
SELECT * FROM jobs WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: job_get_for_update
-- One job by id, locked, inside a tenant scope.
SELECT * FROM jobs WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
FOR UPDATE;

-- name: job_cancel
-- Cancel a job that has not started (pending or waiting for a retry).
UPDATE jobs SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status IN ('pending', 'retryable')
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
RETURNING *;

-- name: job_get_many
-- Jobs by id, in the caller's scope (a repeated bulk cancel's answer).
SELECT id, tenant_id, type, queue, status FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY id;

-- name: job_cancel_count
-- How many unstarted (pending or retryable) jobs match a bulk-cancel filter:
-- the confirmation's preview.  Counted up to %(cap)s (NULL: all): a backlog of
-- millions is counted in seconds, and the preview only needs to say "10,000+".
SELECT count(*) AS n FROM (
    SELECT 1 FROM jobs
    WHERE status IN ('pending', 'retryable')
      AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(type)s::text IS NULL OR type = %(type)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
    LIMIT %(cap)s
) m;

-- name: job_cancel_matching
-- Cancel up to %(limit)s unstarted jobs matching a filter, in one statement.
-- Each row is locked and re-checked (pending or retryable) before it changes:
-- a job a worker claims at this moment is either cancelled first (the claim
-- then skips it) or is running and left alone.  SKIP LOCKED: a row a claim
-- holds is being started, not waiting.  Returns exactly the jobs cancelled.
WITH picked AS (
    SELECT id FROM jobs
    WHERE status IN ('pending', 'retryable')
      AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
      AND (%(type)s::text IS NULL OR type = %(type)s)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now())
FROM picked
WHERE j.id = picked.id AND j.status IN ('pending', 'retryable')
RETURNING j.id, j.tenant_id, j.type, j.version, j.queue;

-- name: job_claim_many
-- Claim up to %(limit)s ready jobs of one queue, fairly across tenants.
--
-- 1. tenants_ready walks the tenants that have due work in this queue, in
--    tenant-id order starting after %(after_tenant)s (the caller's round-robin
--    cursor), with a recursive skip scan over jobs_ready_idx: one index probe
--    per tenant, whatever the backlog.
-- 2. Each of those tenants offers its next jobs by priority then age (a range
--    scan of the same index), at most its weighted share of the batch.
-- 3. Candidates are ordered round by round (a tenant of weight w gets w jobs
--    per round), then by priority and age; a job type or provider at its
--    concurrency limit offers no more than its remaining room.
-- 4. FOR UPDATE SKIP LOCKED lets any number of workers claim at once without
--    blocking each other: a row another claim holds is passed over.
--
-- A job whose group has an older unfinished job waits (ordered groups); a job
-- past its expires_at is left to the expiry service.  The claim commits at
-- once: no transaction stays open while handlers run.  The fencing token is
-- (locked_by, attempts): every later write for this attempt checks both.
-- Times are statement_timestamp(), not the transaction's now(): a claim's
-- started_at is then never earlier than the finish it waited for.
--
-- A tenant with a concurrency limit (%(tenant_caps)s, {tenant id: max_running}:
-- migration 0029) offers no more than its limit minus its running jobs
-- (opsboard_tenant_room, a function: inline, the text passed psycopg's
-- 4096-byte statement cache); the caller holds its advisory lock.
--
-- Paused work (issue 28) is never claimed: %(queue_held)s claims nothing (a
-- one-time filter: the walk does not even start); %(held_tenants)s are passed
-- over in the walk without counting against max_tenants; %(held_types)s (held
-- types, and every type of a held provider) are passed over in each tenant's
-- scan without being read (opsboard_ready_jobs, migration 0039: a walk over the
-- tenant's ready types instead of one range scan while a hold is in force).  Held jobs stay pending in their place: no attempt is spent,
-- nothing is reordered.  The caller passes the holds in force
-- (opsboard.pauses.Holds): parameters, not a read of the pauses table here,
-- keep this statement as cheap as before (reading the table in a CTE here
-- cost a large share of `opsboard bench --scenario process_2`'s throughput).
WITH RECURSIVE tenants_ready AS (
    (SELECT j.tenant_id FROM jobs j
     WHERE j.queue = %(queue)s AND j.status IN ('pending', 'retryable')
       AND j.tenant_id > %(after_tenant)s::uuid
       AND j.available_at <= coalesce(%(now)s, statement_timestamp())
     ORDER BY j.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant_id FROM jobs j
            WHERE j.queue = %(queue)s AND j.status IN ('pending', 'retryable')
              AND j.tenant_id > t.tenant_id
              AND j.available_at <= coalesce(%(now)s, statement_timestamp())
            ORDER BY j.tenant_id LIMIT 1)
    FROM tenants_ready t WHERE t.tenant_id IS NOT NULL
), picked AS (
    -- The weight by one primary-key probe per picked tenant: as a join, the
    -- planner (which cannot know how many tenants the walk yields) hashed the
    -- whole tenants table (every tenant of the scale bench) for a few dozen.
    SELECT r.tenant_id, coalesce((SELECT tn.weight FROM tenants tn WHERE tn.id = r.tenant_id), 1) AS weight
    FROM (SELECT tenant_id FROM tenants_ready
          WHERE tenant_id IS NOT NULL AND NOT %(queue_held)s::bool
            AND tenant_id <> ALL (%(held_tenants)s::uuid[])
          LIMIT %(max_tenants)s) r
), quota AS (
    SELECT tenant_id, weight,
           -- twice the weighted share, so that rows other workers hold can be skipped
           -- (a tenant with a concurrency limit, usually none: no more than its room)
           least(%(limit)s::int, 2 * ceil(%(limit)s::float8 * weight / sum(weight) OVER ())::int + weight,
                 opsboard_tenant_room(tenant_id, %(tenant_caps)s)) AS take
    FROM picked
), cand AS (
    -- Each tenant's next jobs (opsboard_ready_jobs: due, unexpired, first of their group, unheld),
    -- numbered in the index's own order (no sort without a hold).
    SELECT c.id, c.type, c.priority, c.available_at, q.tenant_id, ceil(c.rn::float8 / q.weight) AS round
    FROM quota q
    CROSS JOIN LATERAL (
        SELECT s.*, row_number() OVER (ORDER BY s.priority, s.available_at, s.id) AS rn
        FROM opsboard_ready_jobs(%(queue)s, q.tenant_id, q.take, %(held_types)s::text[],
                                 coalesce(%(now)s::timestamptz, statement_timestamp())) s
    ) c
), limits AS (
    -- Remaining room per limited type and per limited provider.
    SELECT l.type, l.grp,
           l.lim - (SELECT count(*) FROM jobs r WHERE r.status = 'running' AND r.type = l.type) AS type_room
    FROM unnest(%(limit_types)s::text[], %(limit_type_limits)s::int[], %(limit_type_groups)s::text[])
         AS l(type, lim, grp)
), group_room AS (
    -- A provider with a critical share (opsboard.jobtypes.concurrency_limits) is one group per
    -- side: side 'critical' counts the provider's jobs running in the critical queue, 'other'
    -- those running in every other queue, '' all of them.
    SELECT g.grp, g.lim - (SELECT count(*) FROM jobs r JOIN limits l2 ON l2.type = r.type
                           WHERE r.status = 'running' AND l2.grp = g.grp
                             AND (g.side = '' OR (r.queue = 'critical') = (g.side = 'critical'))) AS room
    FROM unnest(%(limit_groups)s::text[], %(limit_group_limits)s::int[], %(limit_group_sides)s::text[])
         AS g(grp, lim, side)
), lim AS (
    -- Candidates whose claim needs the limit locks: of a limited type, or of a
    -- tenant with a concurrency limit.
    SELECT round, priority, available_at, id FROM cand
    WHERE type = ANY (%(limit_types)s::text[]) OR %(tenant_caps)s::jsonb ? tenant_id::text
), allowed AS (
    -- Candidates of types without a limit, as they are; those of limited
    -- types (usually none) ranked per type and per provider, and kept while
    -- there is room.  Only the second arm sorts.  Without the limit locks
    -- (%(locked)s false): only the candidates ahead of every one in lim (ahead
    -- of its first: two one-time subplans, where `< ALL (SELECT * FROM lim)` scanned
    -- lim once per candidate), so that the locked
    -- claim that follows (opsboard.jobqueue.claim) goes on in the same fair order.
    SELECT id, round, priority, available_at FROM cand
    WHERE cand.type <> ALL (%(limit_types)s::text[])
      AND (%(locked)s OR NOT EXISTS (SELECT FROM lim)
           OR (round, priority, available_at, id)
              < (SELECT f.round, f.priority, f.available_at, f.id FROM lim f
                 ORDER BY f.round, f.priority, f.available_at, f.id LIMIT 1))
    UNION ALL
    SELECT id, round, priority, available_at FROM (
        SELECT cand.*, l.type_room, gr.room AS group_room, k.key_room,
               row_number() OVER (PARTITION BY cand.type ORDER BY round, priority, available_at, id) AS type_rank,
               row_number() OVER (PARTITION BY l.grp ORDER BY round, priority, available_at, id) AS group_rank,
               row_number() OVER (PARTITION BY k.key ORDER BY round, priority, available_at, id) AS key_rank
        FROM cand
        JOIN limits l ON l.type = cand.type
        LEFT JOIN group_room gr ON gr.grp = l.grp AND l.grp <> ''
        -- A type with a limit per concurrency key (issue 50; %(key_types)s, usually none): the
        -- candidate's key (a primary-key probe, for such types only) and its room, the limit less the
        -- key's running jobs (jobs_running_key_idx: running jobs with a key only, migration 0092).
        LEFT JOIN LATERAL (
            SELECT j.concurrency_key AS key,
                   -- a key slowed down for a while (migration 0093: a slow webhook endpoint) has a lower limit
                   least(kl.lim, coalesce((SELECT o.max_running FROM concurrency_key_limits o
                                           WHERE o.key = j.concurrency_key
                                             AND o.until > coalesce(%(now)s::timestamptz, statement_timestamp())),
                                          kl.lim))
                   - (SELECT count(*) FROM jobs r
                      WHERE r.status = 'running' AND r.concurrency_key = j.concurrency_key) AS key_room
            FROM unnest(%(key_types)s::text[], %(key_limits)s::int[]) AS kl(type, lim)
            JOIN jobs j ON j.id = cand.id AND j.concurrency_key IS NOT NULL
            WHERE kl.type = cand.type
        ) k ON true
    ) ranked
    WHERE %(locked)s AND (type_room IS NULL OR type_rank <= type_room)
      AND (group_room IS NULL OR group_rank <= group_room)
      AND (key_room IS NULL OR key_rank <= key_room)
), ordered AS MATERIALIZED (
    SELECT ARRAY(SELECT id FROM allowed ORDER BY round, priority, available_at, id) AS ids
)
-- Lock candidates in order, one primary-key probe each, until the batch is full, and update
-- them (opsboard_claim_locked, migration 0065): in a statement of its own, on a snapshot taken
-- after the walk above, so that a job another worker claimed meanwhile is seen running and
-- left at once (in this statement a re-check of such a row rebuilt every subplan above: a
-- visible share of the server's CPU with two workers, `perf` during `--scenario process_2`).  Rows another claim holds are skipped.  A claim
-- that locks nothing still returns one row, without a job (id null), for its figures: how many
-- candidates it had, so that the worker can tell "another worker took them all" (claim again at
-- once) from "nothing is due" (wait for a notification).
-- c.*: the claimed job's columns as opsboard_claim_locked's RETURNS TABLE lists them (id, type,
-- version, tenant_id, queue, priority, payload, attempts, max_attempts, idempotency_key, group_key,
-- correlation_id, event_id, expires_at, created_at, started_at, locked_until: migration 0065), the
-- same list and order as written out here before (it kept the text over the 4,096-byte cache).
SELECT c.*,
       (SELECT count(*) FROM picked) AS tenants_seen,
       (SELECT max(tenant_id::text) FROM picked) AS last_tenant, EXISTS (SELECT FROM lim) AS lim,
       cardinality(o.ids) AS candidates
FROM ordered o
LEFT JOIN LATERAL opsboard_claim_locked(o.ids, %(limit)s::int, %(worker)s::text, %(lease)s::float8,
                                        %(now)s::timestamptz) c ON true;

-- name: job_claim_lock_limits
-- Serialize claims that check the same concurrency limits (released at commit).
SELECT pg_advisory_xact_lock(hashtextextended('opsboard.limit.' || name, 0))
FROM unnest(%(names)s::text[]) AS name;

-- name: job_record_outcomes
-- Record many outcomes in one statement.  Each row applies only while the job
-- is still running under this worker's fencing token (locked_by, attempts):
-- a worker whose lease was reclaimed writes nothing.  kind is succeeded,
-- retryable, dead, snoozed or released; snoozed and released give the
-- attempt back.  One job_attempts row is written per applied outcome.
--
-- Every step is driven by the batch, never by a join the planner could turn
-- around: held finds and locks each outcome's job by primary key (LATERAL);
-- the updates reach those rows by id = ANY(array), as the claim does; the
-- values of the outcomes other than a plain success are looked up per row in
-- one jsonb map.  (Joining the batch to jobs let the planner start from "this
-- worker's running jobs", which statistics taken while little ran put at one
-- row: a nested loop over every running job for every outcome, a cost that
-- grew with the jobs running.)
WITH d AS (
    -- One row per (job, token): the caller keeps the first of each
    -- (opsboard.jobqueue.record_outcomes), so no sort here.  A batch of plain
    -- successes comes without kinds, delays, codes and details (empty arrays:
    -- unnest pads them with nulls): no kind is succeeded, no delay 0.
    SELECT id, token, coalesce(kind, 'succeeded') AS kind, coalesce(delay, 0) AS delay, code, detail,
           started_at, duration_ms
    FROM unnest(%(ids)b::uuid[], %(tokens)b::int[], %(kinds)b::text[], %(delays)b::float8[],
                %(codes)b::text[], %(details)b::text[], %(started)b::timestamptz[],
                %(durations)b::int[]) AS d(id, token, kind, delay, code, detail, started_at, duration_ms)
), held AS MATERIALIZED (
    -- The outcomes whose job this worker still holds, each job locked: from
    -- here to the end of the statement nobody else can change it.  No status
    -- here: locked_by is set exactly while a job runs (a check constraint),
    -- and a status would let the planner scan the "running" partial indexes
    -- for every outcome instead of probing the primary key.
    SELECT d.*, l.tenant_id
    FROM d CROSS JOIN LATERAL (
        SELECT j.tenant_id FROM jobs j
        WHERE j.id = d.id AND j.locked_by = %(worker)s AND j.attempts = d.token
        FOR UPDATE
    ) l
), ok AS (
    -- By id, not by the locked version's ctid: a version written after this
    -- statement's snapshot (a heartbeat) is invisible to a TID scan, and the
    -- outcome would be lost; by id, the update follows it to that version.
    -- opsboard_key_probe (0051): a primary-key probe per job even in a plan
    -- made while jobs was nearly empty (otherwise a sequential scan, kept).
    UPDATE jobs j
    SET status = 'succeeded', finished_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
        locked_by = NULL, locked_until = NULL
    WHERE j.id = ANY (ARRAY(SELECT id FROM held WHERE kind = 'succeeded')) AND opsboard_key_probe(j.id)
    RETURNING j.id
), other AS (
    -- x.m -> j.id::text: this job's [kind, delay, code].
    UPDATE jobs j
    SET status = (CASE x.m -> j.id::text ->> 0 WHEN 'dead' THEN 'dead' WHEN 'retryable' THEN 'retryable'
                                            ELSE 'pending' END)::job_status,
        attempts = CASE WHEN x.m -> j.id::text ->> 0 IN ('snoozed', 'released') THEN j.attempts - 1
                        ELSE j.attempts END,
        available_at = CASE WHEN x.m -> j.id::text ->> 0 IN ('retryable', 'snoozed', 'released')
                            THEN coalesce(%(now)s::timestamptz, statement_timestamp())
                                 + make_interval(secs => (x.m -> j.id::text ->> 1)::float8)
                            ELSE j.available_at END,
        last_error_code = CASE WHEN x.m -> j.id::text ->> 0 = 'released' THEN j.last_error_code
                               ELSE x.m -> j.id::text ->> 2 END,
        finished_at = CASE WHEN x.m -> j.id::text ->> 0 = 'dead'
                           THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
        locked_by = NULL,
        locked_until = NULL
    FROM (SELECT jsonb_object_agg(id::text, jsonb_build_array(kind, delay, code)) AS m
          FROM held WHERE kind <> 'succeeded') x
    WHERE j.id = ANY (ARRAY(SELECT id FROM held WHERE kind <> 'succeeded')) AND opsboard_key_probe(j.id)
    RETURNING j.id
), att AS (
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, detail,
                              duration_ms, tenant_id)
    SELECT d.id, d.token, %(worker)s, d.started_at, coalesce(%(now)s::timestamptz, statement_timestamp()), d.kind, d.code,
           d.detail, d.duration_ms, d.tenant_id
    FROM held d
), eff AS (
    UPDATE effects e SET state = 'confirmed', confirmed_at = coalesce(%(now)s::timestamptz, statement_timestamp())
    FROM held d
    WHERE d.kind = 'succeeded' AND d.id = ANY(%(effect_job_ids)b::uuid[]) AND e.job_id = d.id
      AND e.state = 'started'
)
SELECT id FROM ok
UNION ALL
SELECT id FROM other;

-- name: job_held_attempts
-- A job this worker still holds under this fencing token: its attempt and its
-- limit (the completer's fallback when the database refused an outcome: the
-- job then fails, retried by count, then dead).  No row: the lease was lost.
SELECT attempts, max_attempts FROM jobs
WHERE id = %(id)s AND locked_by = %(worker)s AND attempts = %(token)s;

-- name: job_heartbeat_many
-- Extend the leases of running jobs this worker still holds; returns those extended.
UPDATE jobs j
SET locked_until = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease)s)
FROM unnest(%(ids)s::uuid[], %(tokens)s::int[]) AS d(id, token)
WHERE j.id = d.id AND j.locked_by = %(worker)s AND j.attempts = d.token  -- running (see job_record_outcomes)
RETURNING j.id;

-- name: job_rescue_expired
-- The lease reaper: running jobs whose lease ran out (their worker died or
-- hung) become retryable, or dead when no attempt is left.  One attempt row
-- records the lost attempt.
WITH lost AS (
    SELECT id, locked_by FROM jobs
    WHERE status = 'running' AND locked_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), upd AS (
    UPDATE jobs j
    SET status = (CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'retryable' END)::job_status,
        last_error_code = 'lease_expired',
        -- Back off before the next try (a job that kills its worker must not
        -- crash-loop the fleet): 2^attempts seconds, capped at 5 min, jittered.
        available_at = coalesce(%(now)s::timestamptz, now())
                       + make_interval(secs => least(300, power(2, j.attempts)) * (0.5 + random() / 2)),
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN coalesce(%(now)s::timestamptz, now()) END,
        locked_by = NULL,
        locked_until = NULL
    FROM lost
    WHERE j.id = lost.id
    RETURNING j.id, j.attempts, j.status, j.started_at, j.tenant_id, j.type, lost.locked_by AS worker
)
INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, detail, tenant_id)
SELECT id, attempts, coalesce(worker, 'unknown'), coalesce(started_at, coalesce(%(now)s::timestamptz, now())),
       coalesce(%(now)s::timestamptz, now()), 'lease_expired', 'lease_expired',
       'the worker stopped renewing its lease (crashed, killed or hung)', tenant_id
FROM upd
RETURNING job_id;

-- name: job_expire_many
-- The expiry service: jobs that did not start before expires_at are pointless now.
WITH stale AS (
    SELECT id FROM jobs
    WHERE expires_at IS NOT NULL AND expires_at <= coalesce(%(now)s::timestamptz, now())
      AND status IN ('pending', 'retryable')
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'dead', last_error_code = 'expired',
                  finished_at = coalesce(%(now)s::timestamptz, now())
FROM stale WHERE j.id = stale.id
RETURNING j.id;

-- name: job_walk_in_index_order
-- Before a maintenance batch that takes the first rows of an index's order (the
-- pruners' walk up a primary key: job_prune_finished, outbox_prune_relayed; the
-- expiry's oldest expired jobs: job_expire_many), in the batch's transaction:
-- the batch reads that index in order, a batch's worth, whatever the statistics
-- say.  Without any (a restore: pg_restore brings none; a bulk load before
-- autovacuum's ANALYZE; a server without autovacuum), or with stale ones, the
-- planner believed the range small and read all of it through a bitmap (or
-- through another partial index), then sorted it, for every batch: 100,000
-- finished jobs read for a prune batch of 50, 100,000 expired jobs for an
-- expiry batch of 500 (EXPLAIN ANALYZE), so a backlog of N cost N times
-- N / batch.  With bitmaps and sorts off the ordered index scan is the plan
-- left, the one the planner takes with statistics; probes by id = ANY(array)
-- use the key all the same.  Local to the transaction (PgBouncer's transaction
-- pooling keeps it there).  Sequential scans are off too: with no statistics the
-- planner took one for the delete's id = ANY(array) probe of a batch (3,050 jobs
-- read for a batch of 50, test_queue_plans; seen after migrations 0071-0084, the
-- cause not pinned down); a table with no usable index is still scanned.
SELECT set_config('enable_bitmapscan', 'off', true) AS bitmapscan, set_config('enable_sort', 'off', true) AS sort,
       set_config('enable_seqscan', 'off', true) AS seqscan;

-- name: job_prune_finished
-- The pruner: delete succeeded and cancelled jobs finished before the cutoff,
-- with their attempts, one primary-key range at a time.  UUIDv7 ids sort by
-- creation time, so the primary key bounds the scan to old rows without an
-- index on finished_at; %(after_id)s is the last id the previous batch read,
-- so the jobs kept in the range (dead letters, old scheduled jobs) and the
-- index entries of rows already deleted are passed once per run, not once
-- per batch.  No row lock: succeeded and cancelled are final states nothing
-- updates (the delete re-checks the status all the same), and a lock would
-- write each row once more before deleting it.  Returns the jobs deleted, the
-- rows read and the last id read (the next batch's %(after_id)s).
WITH old AS (
    SELECT id FROM jobs
    WHERE id > %(after_id)s::uuid AND id < %(cutoff_id)s::uuid
      AND status IN ('succeeded', 'cancelled') AND finished_at < %(cutoff)s::timestamptz
    ORDER BY id
    LIMIT %(limit)s
), gone AS (
    -- By id = ANY(array), as the claim does: joined to the CTE, the planner
    -- hashed the whole jobs and job_attempts tables for every batch (a
    -- sequential scan of each: EXPLAIN at 100,000 finished jobs).
    DELETE FROM jobs j
    WHERE j.id = ANY (ARRAY(SELECT id FROM old)) AND j.status IN ('succeeded', 'cancelled')
    RETURNING j.id
), att AS (
    DELETE FROM job_attempts a WHERE a.job_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM old) AS seen, (SELECT id FROM old ORDER BY id DESC LIMIT 1) AS last_id;

-- name: job_stats_prune
-- Drop per-minute statistics older than the cutoff, folding their counts into
-- job_stats_totals in the same statement: the lifetime counters never drop.
WITH pruned AS (
    DELETE FROM job_stats WHERE minute < %(cutoff)s::timestamptz
    RETURNING queue, type, succeeded, retried, dead, snoozed
)
INSERT INTO job_stats_totals AS t (queue, type, succeeded, retried, dead, snoozed)
SELECT queue, type, sum(succeeded), sum(retried), sum(dead), sum(snoozed)
FROM pruned GROUP BY queue, type
ON CONFLICT (queue, type) DO UPDATE SET
    succeeded = t.succeeded + excluded.succeeded,
    retried = t.retried + excluded.retried,
    dead = t.dead + excluded.dead,
    snoozed = t.snoozed + excluded.snoozed;

-- name: job_dead_select
-- Dead jobs matching a filter, for bulk replay (at most %(limit)s), with the
-- number of all matching jobs (the window runs before the limit): the
-- dashboard's confirmation asks for limit 1 and reads only the count.
SELECT id, count(*) OVER () AS matched FROM jobs
WHERE status = 'dead'
  AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(type)s::text IS NULL OR type = %(type)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tenant_id)s::uuid IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
  AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR finished_at < %(until)s)
  -- past its expires_at a dead job is not replayed (jobqueue.replay refuses it: job_expired)
  AND (expires_at IS NULL OR expires_at > now())
  -- open_only: skip dead jobs already replayed or resolved, so that replaying
  -- "all matching" twice does not replay the same dead job twice.
  AND (NOT %(open_only)s OR (
        NOT EXISTS (SELECT 1 FROM job_resolutions r WHERE r.job_id = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.replay_of = jobs.id)
        AND NOT EXISTS (SELECT 1 FROM job_replay_links l WHERE l.dead_job_id = jobs.id)))
ORDER BY id
LIMIT %(limit)s;

-- name: job_attempts_list
-- Every attempt of a job, oldest first.
SELECT * FROM job_attempts WHERE job_id = %(job_id)s ORDER BY started_at, attempt;

-- name: effect_begin
-- Record an external effect as started, or return the existing record of the
-- same tenant.  A started (unconfirmed) effect is adopted by the calling job,
-- so that a replay's success confirms it; a confirmed one is left as it is.
WITH up AS (
    INSERT INTO effects (key, job_id, tenant_id, provider)
    VALUES (%(key)s, %(job_id)s, %(tenant_id)s, %(provider)s)
    ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id
        WHERE effects.state = 'started' AND effects.tenant_id = excluded.tenant_id
    RETURNING *, (xmax = 0) AS created
)
SELECT * FROM up
UNION ALL
SELECT *, false AS created FROM effects
WHERE key = %(key)s AND tenant_id = %(tenant_id)s AND NOT EXISTS (SELECT 1 FROM up);

-- name: effect_set_ref
-- Remember the provider's reference for a started effect (and adopt it for this job).
UPDATE effects SET provider_ref = %(ref)s, job_id = %(job_id)s
WHERE key = %(key)s AND tenant_id = %(tenant_id)s AND state = 'started'
RETURNING *;

-- name: job_stats_add
-- Add a worker's per-minute counters (its own rows: workers never contend).
-- %(rows)s is a JSON array of objects; histograms are added element-wise.
INSERT INTO job_stats AS s (minute, worker_id, queue, type, succeeded, retried, dead, snoozed,
                            duration_ms_sum, duration_hist)
SELECT minute, worker_id, queue, type, succeeded, retried, dead, snoozed, duration_ms_sum, duration_hist
FROM jsonb_to_recordset(%(rows)s::jsonb)
     AS t(minute timestamptz, worker_id text, queue text, type text, succeeded int, retried int, dead int,
          snoozed int, duration_ms_sum bigint, duration_hist int[])
ON CONFLICT (minute, worker_id, queue, type) DO UPDATE SET
    succeeded = s.succeeded + excluded.succeeded,
    retried = s.retried + excluded.retried,
    dead = s.dead + excluded.dead,
    snoozed = s.snoozed + excluded.snoozed,
    duration_ms_sum = s.duration_ms_sum + excluded.duration_ms_sum,
    duration_hist = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
                          FROM unnest(s.duration_hist, excluded.duration_hist) AS x(a, b));

-- name: job_notify_queues
-- Wake every worker's claimer for these queues (a finished job freed room
-- under a concurrency limit, or the next job of an ordered group).
SELECT pg_notify('opsboard_jobs', q) FROM unnest(%(queues)s::text[]) AS q;

-- name: job_still_held
-- Whether this attempt still holds its job: running, fenced by (locked_by,
-- attempts), and the lease not yet run out (even if no reaper has noticed).
-- "Running" is read from locked_by, which is set exactly while a job runs (a
-- check constraint): with status = 'running' here the planner may read the
-- whole running partial index, which statistics taken while little ran call
-- empty, instead of one primary-key probe (so in the statements below too).
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE id = %(id)s AND locked_by = %(worker)s AND attempts = %(attempt)s  -- locked_by: running (see below)
      AND locked_until > coalesce(%(now)s::timestamptz, now())
) AS held;

-- name: effect_begin_held
-- effect_begin, only while the calling attempt holds its job (see
-- job_still_held): a stale attempt starts nothing and adopts nothing.  The job
-- row is share-locked so that the reaper cannot take it between the check and
-- the insert.  Returns one row: held, and the effect (NULL columns when not held
-- and none exists); attempt is the attempt that started or last adopted it.
WITH held AS (
    SELECT EXISTS (
        SELECT 1 FROM jobs
        WHERE id = %(job_id)s AND locked_by = %(worker)s AND attempts = %(attempt)s
          AND locked_until > coalesce(%(now)s::timestamptz, now())
        FOR SHARE
    ) AS held
), up AS (
    INSERT INTO effects (key, job_id, tenant_id, provider, attempt)
    SELECT %(key)s, %(job_id)s, %(tenant_id)s, %(provider)s, %(attempt)s FROM held WHERE held.held
    ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, attempt = excluded.attempt
        WHERE effects.state = 'started' AND effects.tenant_id = excluded.tenant_id
    RETURNING *, (xmax = 0) AS created
), found AS (
    SELECT * FROM up
    UNION ALL
    SELECT *, false AS created FROM effects
    WHERE key = %(key)s AND tenant_id = %(tenant_id)s AND NOT EXISTS (SELECT 1 FROM up)
)
SELECT held.held, found.* FROM held LEFT JOIN found ON true;

-- name: job_running_by_worker
-- The jobs a (dead) worker process still holds, with how each one's earlier
-- runs ended: crashes (a worker died under it) versus any other end.
SELECT j.id, j.type, j.version, j.queue, j.tenant_id, j.attempts, j.max_attempts, j.group_key, j.started_at,
       (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id
         AND a.error_code IN ('crashed_worker', 'crash_suspect')) AS crashes,
       (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id
         AND a.outcome IN ('succeeded', 'retryable', 'dead', 'lease_expired')
         AND a.error_code IS DISTINCT FROM 'crashed_worker') AS other_ends
FROM jobs j
WHERE j.status = 'running' AND j.locked_by = %(worker)s
ORDER BY j.started_at;

-- name: job_keys_in_flight
-- Running jobs per concurrency key (issue 50), the busiest first: a read of
-- jobs_running_key_idx, which holds running jobs with a key only.
SELECT type, concurrency_key AS key, count(*) AS running
FROM jobs WHERE status = 'running' AND concurrency_key IS NOT NULL
GROUP BY type, concurrency_key
ORDER BY count(*) DESC, concurrency_key
LIMIT %(limit)s;

-- name: job_key_in_flight
-- One concurrency key's running jobs of %(type)s, and all running jobs of that type
-- (the key's share of them): jobs_running_type_idx.
SELECT count(*) FILTER (WHERE concurrency_key = %(key)s) AS running, count(*) AS type_running
FROM jobs WHERE status = 'running' AND type = %(type)s;

-- name: job_key_limit_set
-- Give concurrency key %(key)s its own lower limit until %(seconds)s from now (migration 0093: a
-- webhook endpoint that answered slowly), replacing an earlier one.
INSERT INTO concurrency_key_limits AS k (key, max_running, reason, until, set_at)
VALUES (%(key)s, %(max_running)s, %(reason)s, now() + make_interval(secs => %(seconds)s), now())
ON CONFLICT (key) DO UPDATE SET max_running = excluded.max_running, reason = excluded.reason,
                                until = excluded.until, set_at = excluded.set_at;

-- name: job_key_limit_get
-- A concurrency key's own lower limit in force (none past its "until").
SELECT max_running, reason, until FROM concurrency_key_limits
WHERE key = %(key)s AND until > coalesce(%(now)s::timestamptz, now());
