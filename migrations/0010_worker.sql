-- Worker runtime: maintenance-service failures, counted for
-- opsboard_service_errors_total.  Lifetime totals, one row per service,
-- never pruned (a Prometheus counter must not go down).

CREATE TABLE service_errors (
    service       text PRIMARY KEY,
    errors        bigint NOT NULL DEFAULT 0 CHECK (errors >= 0),
    last_error_at timestamptz
);
