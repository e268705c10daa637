-- The ops dashboard: resolutions of dead jobs, alerts, and the indexes the job
-- list, the dead-letter page and the alert rules read through.

-- An operator's decision about a dead job.  The dead job itself is never
-- changed (a trigger forbids it): this row says it was looked at, and why.
-- One decision per job; the audit log keeps who decided what and when.
CREATE TABLE job_resolutions (
    -- Cascade only so that a future pruner of old dead jobs is not blocked;
    -- today nothing deletes dead jobs.
    job_id     uuid PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    resolution text NOT NULL CHECK (resolution IN ('resolved', 'ignored')),
    reason     text NOT NULL CHECK (length(btrim(reason)) > 0),
    actor      text NOT NULL,
    actor_id   uuid REFERENCES users (id),
    at         timestamptz NOT NULL DEFAULT now()
);

-- Alerts raised by the leader's alert service (opsboard.alerts).  One open
-- alert per (rule, key); re-evaluation refreshes last_seen_at, and closes the
-- alert once its condition has cleared.  A later recurrence opens a new row.
CREATE TABLE alerts (
    id                 uuid PRIMARY KEY,          -- UUIDv7
    rule               text NOT NULL,
    key                text NOT NULL,
    -- NULL: about the platform (a queue, an error code across tenants); only
    -- operator staff see those.  A tenant's own alerts carry its id.
    tenant_id          uuid REFERENCES tenants (id),
    severity           text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    summary            text NOT NULL,
    details            jsonb NOT NULL DEFAULT '{}',
    opened_at          timestamptz NOT NULL,
    last_seen_at       timestamptz NOT NULL,
    acknowledged_at    timestamptz,
    acknowledged_by    text,
    acknowledged_by_id uuid REFERENCES users (id),
    ack_reason         text,
    closed_at          timestamptz,
    CHECK ((acknowledged_at IS NULL) = (acknowledged_by IS NULL)),
    CHECK (closed_at IS NULL OR closed_at >= opened_at)
);
-- The dedupe rule, enforced: at most one open alert per rule and key.
CREATE UNIQUE INDEX alerts_open_key_idx ON alerts (rule, key) WHERE closed_at IS NULL;
-- The banner's count on every page: open and not acknowledged (a handful of rows).
CREATE INDEX alerts_unacked_idx ON alerts (opened_at) WHERE closed_at IS NULL AND acknowledged_at IS NULL;
-- The alerts page: recently closed ones.
CREATE INDEX alerts_closed_idx ON alerts (closed_at DESC) WHERE closed_at IS NOT NULL;

-- The job list filtered by tenant (and every page of a tenant-scoped user),
-- newest first: keyset pagination walks (tenant_id, id) backwards.
CREATE INDEX jobs_tenant_idx ON jobs (tenant_id, id);
-- The job list filtered by status, newest first.  Status changes are already
-- non-HOT updates (status is in the ready index's predicate), so this costs one
-- more index insertion per status change, not a new kind of write.
CREATE INDEX jobs_status_idx ON jobs (status, id);
-- A job's page shows the earlier jobs of its ordered group that died (the
-- group moved on past them); only dead grouped rows are in it.
CREATE INDEX jobs_group_dead_idx ON jobs (tenant_id, group_key, id)
    WHERE group_key IS NOT NULL AND status = 'dead';
-- "Dead jobs finished in the last ten minutes" (alerts, the dead-letter page's
-- newest failure): only dead rows, so it is written once per dead job.
CREATE INDEX jobs_dead_finished_idx ON jobs (finished_at) WHERE status = 'dead';
-- Attempts that failed recently (the same-error-code alert).  BRIN: attempts
-- are appended in time order, so a block-range index is nearly free to keep
-- on the hot path and still turns "the last ten minutes" into a short scan.
CREATE INDEX job_attempts_finished_brin ON job_attempts USING brin (finished_at);

-- Text search over error codes and attempt details (ILIKE '%term%') uses
-- trigram indexes where the pg_trgm extension exists (it is a trusted
-- extension in PostgreSQL 13+, so the database owner may create it).  The
-- embedded server used on bare machines ships without it: there the same
-- queries run without these indexes, which is fine at demo sizes.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pg_trgm not created (insufficient privilege): job search runs without trigram indexes';
            RETURN;
        END;
        CREATE INDEX job_attempts_detail_trgm ON job_attempts USING gin (detail gin_trgm_ops)
            WHERE detail IS NOT NULL;
        CREATE INDEX jobs_error_code_trgm ON jobs USING gin (last_error_code gin_trgm_ops)
            WHERE last_error_code IS NOT NULL;
    END IF;
END;
$$;
