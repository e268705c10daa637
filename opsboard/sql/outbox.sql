-- name: outbox_event_insert
-- Append one event in the caller's transaction (its commit may wake the relays: migration 0017).
INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, occurred_at,
                           correlation_id, payload, trace_context)
VALUES (%(id)s, %(type)s, %(version)s, %(aggregate_type)s, %(aggregate_id)s, %(tenant_id)s,
        coalesce(%(now)s::timestamptz, now()), %(correlation_id)s, %(payload)s, %(trace_context)s)
RETURNING *;

-- name: outbox_relay_plain
-- One relay batch, set-based, in ONE statement.  Lock up to %(limit)s
-- unrelayed events, oldest first, and keep those this relay may route now.
-- SKIP LOCKED lets every worker's relay take its own batch without waiting on
-- the others.  An event is held back (left for a later pass) while an earlier
-- event of its aggregate is unrelayed outside this batch (locked by another
-- relay, or not seen): otherwise two relays could commit one aggregate's jobs
-- out of order.  The fence is one walk of the partial index per aggregate,
-- stopping at its first event outside the batch, so its cost follows the
-- batch, not the backlog.  Of those kept, insert the jobs of those whose every subscription is "plain" (the default
-- job payload, no upcast: outbox.sql_routes), with idempotency key
-- <event id>:<subscriber> and the job id of outbox.job_id_for, and mark them
-- relayed.  %(routes)s is a JSON array of one object per (event type/version,
-- subscriber); %(plain)s the type/version keys routed here (with or without
-- subscribers); %(ordered)s those with an ordered subscriber, whose events are
-- routed here only when the group key fits in 200 characters, and only before
-- the first event of their aggregate that is not routed here.  Returns the
-- kept events left for Python's routing (outbox.jobs_for; they stay locked by
-- this transaction), in id order, each with the counts of events and jobs
-- relayed here -- or one row of counts with NULL event columns when none is
-- left.  With an empty %(plain)s it only locks and fences: every kept event
-- is left.  In autocommit it is a whole relay pass in one round trip (the
-- events left are unlocked again, for a transaction that routes them).
WITH batch AS (
    SELECT id, type, version, aggregate_type, aggregate_id, tenant_id, occurred_at, correlation_id, payload,
           trace_context
    FROM outbox_events
    WHERE relayed_at IS NULL
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), fence AS MATERIALIZED (
    SELECT a.tenant_id, a.aggregate_type, a.aggregate_id,
           (SELECT o.id FROM outbox_events o
            WHERE o.relayed_at IS NULL AND o.tenant_id = a.tenant_id AND o.aggregate_type = a.aggregate_type
              AND o.aggregate_id = a.aggregate_id AND o.id NOT IN (SELECT id FROM batch)
            ORDER BY o.id LIMIT 1) AS first_outside
    FROM (SELECT DISTINCT tenant_id, aggregate_type, aggregate_id FROM batch) a
), ready AS MATERIALIZED (
    SELECT b.*, b.type || '/' || b.version AS key
    FROM batch b JOIN fence f USING (tenant_id, aggregate_type, aggregate_id)
    WHERE f.first_outside IS NULL OR b.id < f.first_outside
), plain AS MATERIALIZED (
    -- Only up to an aggregate's first event left for Python: run in autocommit, this statement's
    -- jobs must not overtake an earlier event's jobs of the same aggregate (an ordered group).
    SELECT * FROM (
        SELECT f.*, bool_or(NOT f.sql_routed) OVER (PARTITION BY f.tenant_id, f.aggregate_type, f.aggregate_id
                                                    ORDER BY f.id) AS after_left
        FROM (SELECT e.*, e.key = ANY(%(plain)s::text[])
                          AND (e.key <> ALL(%(ordered)s::text[])
                               OR length(e.aggregate_type) + length(e.aggregate_id) <= 138) AS sql_routed
              FROM ready e) f
    ) w
    WHERE w.sql_routed AND NOT w.after_left
), routed AS MATERIALIZED (
    SELECT e.*, r.*
    FROM plain e
    JOIN jsonb_to_recordset(%(routes)s::jsonb)
         AS r(route text, subscriber text, suffix bigint, job_type text, job_version smallint, queue text,
              priority smallint, max_attempts int, ordered boolean, expires_in interval)
      ON r.route = e.key
), ins AS (
    INSERT INTO jobs (id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload,
                      max_attempts, available_at, expires_at, correlation_id, event_id, trace_context)
    SELECT (left(x.id::text, 28) || lpad(to_hex(x.suffix), 8, '0'))::uuid, x.job_type, x.job_version, x.tenant_id,
           x.queue, x.priority, x.id::text || ':' || x.subscriber,
           CASE WHEN x.ordered THEN x.aggregate_type || ':' || x.aggregate_id || ':' || x.subscriber END,
           jsonb_build_object('event_id', x.id::text, 'event_type', x.type, 'event_version', x.version,
                              'aggregate', x.aggregate_type || ':' || x.aggregate_id, 'data', x.payload),
           x.max_attempts, now(), x.occurred_at + x.expires_in, x.correlation_id, x.id, x.trace_context
    FROM routed x
    ORDER BY x.id, x.subscriber
    ON CONFLICT (tenant_id, type, idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'dead'
    DO NOTHING
), marked AS (
    UPDATE outbox_events o SET relayed_at = coalesce(%(now)s::timestamptz, now())
    FROM plain e WHERE o.id = e.id
    RETURNING 1
)
SELECT n.events, n.jobs, r.id, r.type, r.version, r.aggregate_type, r.aggregate_id, r.tenant_id, r.occurred_at,
       r.correlation_id, r.payload, r.trace_context
FROM (SELECT (SELECT count(*) FROM marked)::int AS events, (SELECT count(*) FROM routed)::int AS jobs) n
LEFT JOIN (SELECT * FROM ready WHERE id NOT IN (SELECT id FROM plain)) r ON true
ORDER BY r.id;

-- name: outbox_relay_walk_in_order
-- Before outbox_relay_plain, in its transaction: the batch takes the first
-- unrelayed events in id order, a batch's worth, whatever the statistics say
-- (job_walk_in_index_order's rule for the maintenance batches).  Without any (a
-- restore, a bulk load before autovacuum's ANALYZE, a server without
-- autovacuum) the planner read every unrelayed event through a bitmap and
-- sorted them for each batch: 3,100 events read for a batch of 50 out of
-- 3,000 waiting (tests/integration/test_relay_plan.py), so a backlog of N cost
-- N times N / batch.  Local to the transaction; the values in force before are
-- kept (opsboard.relay_walk_saved) for outbox_relay_walk_restore, since the
-- relay's transaction goes on with other statements when Python routes events.
SELECT set_config('enable_bitmapscan', 'off', true) AS bitmapscan, set_config('enable_sort', 'off', true) AS sort,
       set_config('enable_seqscan', 'off', true) AS seqscan
FROM (SELECT set_config('opsboard.relay_walk_saved',
                        concat_ws(' ', current_setting('enable_bitmapscan'), current_setting('enable_sort'),
                                  current_setting('enable_seqscan')), true)) saved;

-- name: outbox_relay_walk_restore
-- After outbox_relay_plain in a transaction that goes on: the planner's settings as they were
-- before outbox_relay_walk_in_order.
SELECT set_config('enable_bitmapscan', split_part(s, ' ', 1), true) AS bitmapscan,
       set_config('enable_sort', split_part(s, ' ', 2), true) AS sort,
       set_config('enable_seqscan', split_part(s, ' ', 3), true) AS seqscan
FROM (SELECT current_setting('opsboard.relay_walk_saved') AS s) saved;

-- name: outbox_mark_relayed
-- Mark events relayed, in the transaction that inserted their jobs.
UPDATE outbox_events SET relayed_at = coalesce(%(now)s::timestamptz, now())
WHERE id = ANY(%(ids)s::uuid[]) AND relayed_at IS NULL;

-- name: outbox_event_get
-- One event by id, inside a tenant scope.
SELECT * FROM outbox_events WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: outbox_prune_relayed
-- Delete up to %(limit)s events relayed before the cutoff (the trigger refuses to
-- delete an unrelayed one), walking the primary key upwards from %(after_id)s as
-- job_prune_finished does: UUIDv7 ids sort by creation time and an event is
-- relayed after it was made, so the walk stops at the cutoff's id and reads the
-- old end of the table only, and the next batch starts after the last id read
-- (the rows already deleted are passed once per walk).  By id = ANY(array): the
-- join to the CTE it replaces hashed the whole table for every batch (a
-- sequential scan); now a batch costs the same whatever the table's size
-- (docs/performance.md, pruners).  Returns the events deleted,
-- the rows read and the last id read.
WITH old AS (
    SELECT id FROM outbox_events
    WHERE id > %(after_id)s::uuid AND id < %(cutoff_id)s::uuid
      AND relayed_at IS NOT NULL AND relayed_at < %(cutoff)s::timestamptz
      -- While an export to NATS JetStream runs (a row in event_export_state, migration 0071), an
      -- event it has not sent yet stays: a stream that was away for days still gets every event.
      AND (exported_at IS NOT NULL OR NOT EXISTS (SELECT 1 FROM event_export_state))
    ORDER BY id
    LIMIT %(limit)s
), gone AS (
    DELETE FROM outbox_events e WHERE e.id = ANY (ARRAY(SELECT id FROM old))
    RETURNING e.id
)
SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM old) AS seen,
       (SELECT id FROM old ORDER BY id DESC LIMIT 1) AS last_id;

-- name: outbox_backlog
-- Events of the tenants in a scope waiting for a relay, the age of the oldest
-- (the relay's lag), and events parked as unroutable in the last 24 hours
-- (relayed without jobs; see outbox.relay_events).
SELECT (SELECT count(*) FROM outbox_events
        WHERE relayed_at IS NULL AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[])))::bigint AS waiting,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - (
           SELECT min(occurred_at) FROM outbox_events
           WHERE relayed_at IS NULL AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))))::float8
           AS oldest_seconds,
       (SELECT count(*) FROM audit_log
        WHERE action = 'outbox.park' AND at > coalesce(%(now)s::timestamptz, now()) - interval '24 hours'
          AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[])))::bigint AS parked_24h;

-- name: outbox_event_admit
-- POST /events, step 1 of 2 (publish.take_admission): with an Idempotency-Key
-- (%(key)s, else NULL), the answer stored for this (tenant, key) by an earlier
-- request (prior); only when there is none, admission as limits.sql
-- admission_take (the queue's sampled depth against its mark, the tenant's rate
-- and burst, one token).  Run alone in autocommit: it is its own transaction,
-- committed without waiting for its WAL flush (the set_config below), so the
-- tenant's bucket row is locked for this statement only, never through the
-- event's durable commit (which serialized one tenant's requests on the disk's
-- flush time: `opsboard bench --scenario api_worker` posts as one tenant).
-- granted (the tokens taken, 0: refused) is NULL for a key already answered or a full queue.
WITH now_ AS (SELECT coalesce(%(now)s::timestamptz, now()) AS t),
prior AS (
    SELECT request_hash, status, response FROM api_idempotency WHERE tenant_id = %(tenant_id)s AND key = %(key)s
), depth AS (
    SELECT coalesce(sum(jobs) FILTER (WHERE status IN ('pending', 'retryable')), 0)::bigint AS waiting
    FROM queue_depth_totals WHERE queue = %(queue)s  -- the fold's totals: a few rows per queue
), lim AS (
    SELECT coalesce((SELECT nullif(enqueue_rate, 0) FROM tenants WHERE id = %(tenant_id)s), %(default_rate)s::float8) AS rate,
           coalesce((SELECT nullif(enqueue_burst, 0) FROM tenants WHERE id = %(tenant_id)s), %(default_burst)s::int) AS burst
), admitted AS (
    -- OFFSET 0 keeps this a separate step: no token is taken for a key already
    -- answered or when the queue is full.
    SELECT lim.rate, lim.burst, now_.t FROM now_, lim, depth
    WHERE NOT EXISTS (SELECT 1 FROM prior)
      AND (%(mark)s::bigint IS NULL OR depth.waiting + 1 <= %(mark)s::bigint)
    OFFSET 0
), take AS (
    -- %(want)s tokens at most (a web process's lease: backpressure.TokenLeases; 1 otherwise), and the
    -- %(back)s its previous lease left unspent given back first (migration 0061).
    SELECT tk.granted, tk.wait_seconds
    FROM admitted a
    CROSS JOIN LATERAL opsboard_take_tokens(%(name)s::text, greatest(1, a.burst)::float8, a.rate, a.t,
                                            %(want)s::int, %(back)s::float8) tk
)
SELECT depth.waiting, lim.rate, lim.burst, take.granted, take.wait_seconds, (SELECT t FROM now_) AS now,
       prior.request_hash AS prior_hash, prior.status AS prior_status, prior.response AS prior_response,
       -- This transaction only (is_local), read at its commit: the token is not worth a flush.
       set_config('synchronous_commit', 'off', true) AS synchronous_commit
FROM depth CROSS JOIN lim LEFT JOIN take ON true LEFT JOIN prior ON true;

-- name: outbox_event_insert_once
-- POST /events with an Idempotency-Key, step 2 of 2 (without one, step 2 is outbox_event_insert), after a granted token: the
-- key's claim with its answer (%(answer)s plus occurred_at) and, only when the
-- key was claimed, the event; one statement, committed (durably) in autocommit.
-- A concurrent request holding the same key makes the claim wait until it
-- commits (then nothing is inserted and claimed is false: the caller reads the
-- stored answer and gives the token back) or rolls back.  The stored answer is
-- not sent back: the caller has it, and occurred_at (publish.answer_time
-- writes it as to_char below does), without a jsonb parse per request.
WITH now_ AS (SELECT coalesce(%(now)s::timestamptz, now()) AS t),
claim AS (
    INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response)
    SELECT %(tenant_id)s, %(key)s, %(request_hash)s, %(status)s,
           %(answer)s::jsonb || jsonb_build_object(
               'occurred_at', to_char(now_.t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'))
    FROM now_
    ON CONFLICT (tenant_id, key) DO NOTHING
    RETURNING 1
), ins AS (
    INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, occurred_at,
                               correlation_id, payload, trace_context)
    SELECT %(id)s, %(type)s, %(version)s, %(aggregate_type)s, %(aggregate_id)s, %(tenant_id)s, now_.t,
           %(correlation_id)s, %(payload)s, %(trace_context)s
    FROM now_, claim
    RETURNING occurred_at
)
SELECT (SELECT occurred_at FROM ins) AS occurred_at, EXISTS (SELECT 1 FROM claim) AS claimed;
