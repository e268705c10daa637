-- name: service_error_add
-- Count maintenance-service failures (lifetime totals, never pruned: they back
-- the opsboard_service_errors_total counter).
INSERT INTO service_errors AS s (service, errors, last_error_at)
SELECT service, n, now() FROM unnest(%(services)s::text[], %(counts)s::bigint[]) AS t(service, n)
ON CONFLICT (service) DO UPDATE SET errors = s.errors + excluded.errors, last_error_at = excluded.last_error_at;

-- name: service_error_totals
-- Every service's lifetime failure count, for /metrics.
SELECT service, errors, last_error_at FROM service_errors ORDER BY service;

-- name: worker_upsert
-- Register a worker process (or refresh it).
INSERT INTO workers (id, hostname, pid, queues, version, state, is_leader, running_jobs)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(version)s, 'running', false, 0)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), state = 'running';

-- name: worker_set_queues
-- A worker's slots per queue changed (an operator's live change, issue 28).
UPDATE workers SET queues = %(queues)s WHERE id = %(id)s;

-- name: worker_heartbeat
-- A worker is alive: refresh its row.
UPDATE workers SET last_seen_at = now(), state = %(state)s, is_leader = %(is_leader)s,
                   running_jobs = %(running_jobs)s,
                   abandoned_threads = coalesce(%(abandoned)s::jsonb, abandoned_threads)
WHERE id = %(id)s;

-- name: worker_delete
-- A worker stopped cleanly.
DELETE FROM workers WHERE id = %(id)s;

-- name: worker_prune_stale
-- Forget workers silent for longer than the cutoff.
DELETE FROM workers WHERE last_seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
RETURNING id;

-- name: worker_command_get
-- What the operator asked of one worker (issue 44): no row, nothing asked.
SELECT worker_id, quiet, stop_requested_at, slots, updated_by, updated_at
FROM worker_commands WHERE worker_id = %(id)s;

-- name: worker_command_list
-- Every worker's command row, for the Workers page.
SELECT worker_id, quiet, stop_requested_at, slots, updated_by, updated_at FROM worker_commands;

-- name: worker_command_set_quiet
-- Quiet a worker (it claims nothing) or let it claim again.  The trigger of
-- 0084 notifies the worker.  Returns the row as it was and as it is.
INSERT INTO worker_commands AS c (worker_id, quiet, updated_by)
VALUES (%(id)s, %(quiet)s, %(actor)s)
ON CONFLICT (worker_id) DO UPDATE SET quiet = excluded.quiet, updated_by = excluded.updated_by, updated_at = now()
RETURNING c.worker_id, c.quiet, c.stop_requested_at, c.slots;

-- name: worker_command_request_stop
-- Ask a worker to drain and exit (the first request's time is kept).
INSERT INTO worker_commands AS c (worker_id, stop_requested_at, updated_by)
VALUES (%(id)s, now(), %(actor)s)
ON CONFLICT (worker_id) DO UPDATE SET stop_requested_at = coalesce(c.stop_requested_at, now()),
                                      updated_by = excluded.updated_by, updated_at = now()
RETURNING c.worker_id, c.quiet, c.stop_requested_at, c.slots;

-- name: worker_command_set_slots
-- One worker's slots for one queue (%(slots)s null: back to the queue's live
-- setting or the worker's own).
INSERT INTO worker_commands AS c (worker_id, slots, updated_by)
VALUES (%(id)s, CASE WHEN %(slots)s::int IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object(%(queue)s::text, %(slots)s::int) END, %(actor)s)
ON CONFLICT (worker_id) DO UPDATE
    SET slots = CASE WHEN %(slots)s::int IS NULL THEN c.slots - %(queue)s::text
                     ELSE c.slots || jsonb_build_object(%(queue)s::text, %(slots)s::int) END,
        updated_by = excluded.updated_by, updated_at = now()
RETURNING c.worker_id, c.quiet, c.stop_requested_at, c.slots;

-- name: worker_command_delete
-- A worker stopped cleanly: what was asked of it is done.
DELETE FROM worker_commands WHERE worker_id = %(id)s;

-- name: worker_get
-- One worker's row (the Workers page's controls).
SELECT id, hostname, pid, queues, version, state, started_at, last_seen_at FROM workers WHERE id = %(id)s;
