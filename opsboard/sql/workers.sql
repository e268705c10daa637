-- name: service_error_add
-- Count maintenance-service failures (lifetime totals, never pruned: they back
-- the opsboard_service_errors_total counter).
INSERT INTO service_errors AS s (service, errors, last_error_at)
SELECT service, n, now() FROM unnest(%(services)s::text[], %(counts)s::bigint[]) AS t(service, n)
ON CONFLICT (service) DO UPDATE SET errors = s.errors + excluded.errors, last_error_at = excluded.last_error_at;

-- name: service_error_totals
-- Every service's lifetime failure count, for /metrics.
SELECT service, errors, last_error_at FROM service_errors ORDER BY service;
