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
