-- Reports generated in the background, in chunks, and the cron scheduler's state.
--
-- A run is requested (status queued); its request job plans keyset slices and
-- enqueues one chunk job per slice (running); the chunk that brings done_chunks
-- to total_chunks enqueues the assemble job, exactly once (assemble_enqueued_at);
-- assemble writes the CSV to storage (ready).  A request, chunk or assemble job
-- that goes dead fails the run (trigger below); replaying it resumes the run.

CREATE TYPE report_status AS ENUM ('queued', 'running', 'ready', 'failed');

CREATE TABLE report_runs (
    id                   uuid PRIMARY KEY,              -- UUIDv7, generated in Python
    tenant_id            uuid NOT NULL REFERENCES tenants (id),
    kind                 text NOT NULL,                 -- opsboard.reports registry
    params               jsonb NOT NULL,
    requested_by         uuid REFERENCES users (id),    -- NULL: the scheduler
    requested_label      text NOT NULL,                 -- email, or 'schedule:<name>'
    -- Scheduled runs: '<schedule>@<slot>' makes the run once per slot and tenant.
    source_key           text,
    status               report_status NOT NULL DEFAULT 'queued',
    total_chunks         integer CHECK (total_chunks >= 0),   -- NULL until planned
    done_chunks          integer NOT NULL DEFAULT 0 CHECK (done_chunks >= 0),
    row_count            bigint NOT NULL DEFAULT 0,
    storage_key          text,                          -- the assembled CSV
    byte_size            bigint,
    failed_job_id        uuid,                          -- the dead job that failed the run
    error_code           text,
    assemble_enqueued_at timestamptz,                   -- set once, by the last chunk
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz,
    CHECK (done_chunks <= coalesce(total_chunks, 0)),
    CHECK ((status = 'ready') = (storage_key IS NOT NULL))
);

CREATE INDEX report_runs_tenant_idx ON report_runs (tenant_id, id DESC);
CREATE INDEX report_runs_recent_idx ON report_runs (id DESC);
CREATE UNIQUE INDEX report_runs_source_idx ON report_runs (tenant_id, source_key) WHERE source_key IS NOT NULL;

CREATE TYPE report_chunk_status AS ENUM ('pending', 'done', 'failed');

CREATE TABLE report_chunks (
    run_id      uuid NOT NULL REFERENCES report_runs (id) ON DELETE CASCADE,
    seq         integer NOT NULL CHECK (seq >= 0),
    lower_bound jsonb NOT NULL,                         -- keyset bounds: lower <= key < upper
    upper_bound jsonb,                                  -- NULL: to the end of the range
    est_rows    bigint NOT NULL DEFAULT 0,
    status      report_chunk_status NOT NULL DEFAULT 'pending',
    row_count   bigint,
    part_key    text,                                   -- storage key of the partial CSV
    job_id      uuid,                                   -- the job that last ran (or killed) it
    finished_at timestamptz,
    PRIMARY KEY (run_id, seq)
);

-- Recurring jobs: the last slot each schedule fired (one row per schedule).
CREATE TABLE schedule_state (
    name        text PRIMARY KEY,
    last_slot   timestamptz,                            -- NULL: seen, never fired
    last_fired_at timestamptz,
    last_jobs   integer NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A report job that goes dead fails its run in the same transaction, whoever
-- made it dead (the worker's outcome, the lease reaper, expiry).  Row-level
-- with a WHEN clause: other job types pay one comparison per status change.
CREATE FUNCTION report_job_dead() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run uuid := (NEW.payload ->> 'run_id')::uuid;
BEGIN
    IF run IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.type = 'reports.chunk' THEN
        UPDATE report_chunks SET status = 'failed', job_id = NEW.id
        WHERE run_id = run AND seq = (NEW.payload ->> 'seq')::int AND status <> 'done';
    END IF;
    UPDATE report_runs
    SET status = 'failed', failed_job_id = NEW.id, error_code = NEW.last_error_code, finished_at = now()
    WHERE id = run AND status <> 'ready';
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_report_dead
    AFTER UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status = 'dead' AND OLD.status <> 'dead'
          AND NEW.type IN ('reports.request', 'reports.chunk', 'reports.assemble'))
    EXECUTE FUNCTION report_job_dead();
