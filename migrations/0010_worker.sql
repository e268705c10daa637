-- Worker runtime: maintenance-service failures, counted for
-- opsboard_service_errors_total.  Lifetime totals, one row per service,
-- never pruned (a Prometheus counter must not go down).

CREATE TABLE service_errors (
    service       text PRIMARY KEY,
    errors        bigint NOT NULL DEFAULT 0 CHECK (errors >= 0),
    last_error_at timestamptz
);

-- Handler threads abandoned past their timeout, per queue ({"default": 1}),
-- reported by each worker's heartbeat (shown on the Workers page and /metrics).
ALTER TABLE workers ADD COLUMN abandoned_threads jsonb NOT NULL DEFAULT '{}';

-- The attempt that started an effect (or last adopted it): with the lease
-- check in effect_begin_held, a stale attempt cannot start or resume an
-- effect that another attempt owns.
ALTER TABLE effects ADD COLUMN attempt integer;
