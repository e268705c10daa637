-- Fairness and backpressure: a per-tenant ready index for the tenant-fair
-- claim, shared token buckets, sampled queue depth, tenant enqueue rates.

-- The fair claim walks tenants with ready work (a skip scan over the leading
-- (queue, tenant_id) columns) and takes each tenant's next jobs by priority
-- then age: both are range scans of this one index.  It replaces the global
-- (queue, priority, ...) index, so an update touches one ready index, not two.
DROP INDEX jobs_ready_idx;
CREATE INDEX jobs_ready_idx ON jobs (queue, tenant_id, priority, available_at, id)
    WHERE status IN ('pending', 'retryable');

-- Token buckets shared by every worker: one row per bucket, taken with one
-- atomic UPSERT (opsboard/sql/limits.sql: rate_limit_take).
CREATE TABLE rate_limits (
    name         text PRIMARY KEY,
    capacity     double precision NOT NULL CHECK (capacity >= 1),
    refill_rate  double precision NOT NULL CHECK (refill_rate > 0),  -- tokens per second
    tokens       double precision NOT NULL,
    last_granted boolean NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Queue depth sampled by a leader service every few seconds, so that the
-- dashboard, /metrics and admission control read a few hundred rows instead
-- of counting a million-row backlog on every request.
CREATE TABLE queue_depth (
    queue        text NOT NULL,
    type         text NOT NULL,
    tenant_id    uuid NOT NULL,
    status       job_status NOT NULL,
    jobs         bigint NOT NULL,
    oldest_ready timestamptz,   -- earliest available_at among ready (pending/retryable, due) jobs
    sampled_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, type, tenant_id, status)
);

-- Per-tenant enqueue rate for admission control (NULL: the configured default).
ALTER TABLE tenants ADD COLUMN enqueue_rate double precision CHECK (enqueue_rate > 0),
                    ADD COLUMN enqueue_burst integer CHECK (enqueue_burst > 0);
