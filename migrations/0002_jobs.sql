-- The durable job queue: jobs, their attempts, the effect ledger, live workers
-- and per-minute handler statistics.

CREATE TYPE job_status AS ENUM ('pending', 'running', 'succeeded', 'retryable', 'dead', 'cancelled');

CREATE TABLE jobs (
    id              uuid PRIMARY KEY,               -- UUIDv7, generated in Python
    type            text NOT NULL,
    version         smallint NOT NULL DEFAULT 1,
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    queue           text NOT NULL CHECK (queue IN ('critical', 'default', 'bulk')),
    priority        smallint NOT NULL DEFAULT 100,  -- lower runs first
    idempotency_key text,
    group_key       text,
    payload         jsonb NOT NULL,
    status          job_status NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    integer NOT NULL CHECK (max_attempts > 0),
    available_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    locked_by       text,
    locked_until    timestamptz,
    last_error_code text,
    correlation_id  text,
    event_id        uuid,
    replay_of       uuid REFERENCES jobs (id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    CHECK ((status = 'running') = (locked_by IS NOT NULL))
);

-- The claim: ready jobs of one queue by priority then age.  Partial, so that
-- finished rows (the vast majority) are not in it and a claim stays an index
-- scan however large the table grows.
CREATE INDEX jobs_ready_idx ON jobs (queue, priority, available_at, id)
    WHERE status IN ('pending', 'retryable');
-- The lease reaper.
CREATE INDEX jobs_running_idx ON jobs (locked_until) WHERE status = 'running';
-- Idempotent enqueue: one live job per (tenant, type, key); a dead job frees its key for a replay.
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobs (tenant_id, type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status <> 'dead';
-- Ordered groups: the oldest unfinished job of a group runs first, alone.
CREATE INDEX jobs_group_idx ON jobs (tenant_id, group_key, id)
    WHERE group_key IS NOT NULL AND status IN ('pending', 'running', 'retryable');
-- The expiry service.
CREATE INDEX jobs_expires_idx ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('pending', 'retryable');
-- Dead letters grouped by type and error code.
CREATE INDEX jobs_dead_idx ON jobs (type, last_error_code, id) WHERE status = 'dead';
CREATE INDEX jobs_replay_of_idx ON jobs (replay_of) WHERE replay_of IS NOT NULL;
CREATE INDEX jobs_correlation_idx ON jobs (correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX jobs_event_idx ON jobs (event_id) WHERE event_id IS NOT NULL;

-- A dead job is evidence: it is never edited (replay makes a new job).
CREATE FUNCTION jobs_reject_dead_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % is dead and cannot be changed; replay it instead', OLD.id
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER jobs_dead_is_final
    BEFORE UPDATE ON jobs FOR EACH ROW WHEN (OLD.status = 'dead')
    EXECUTE FUNCTION jobs_reject_dead_update();

-- Wake workers: one notification per inserting statement and queue (the server
-- folds identical notifications of one transaction into one).
CREATE FUNCTION jobs_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_jobs LOOP
        PERFORM pg_notify('opsboard_jobs', q);
    END LOOP;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_notify_insert
    AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_insert();

-- One row per attempt (and per snooze or release, which do not count).
CREATE TABLE job_attempts (
    job_id      uuid NOT NULL,
    attempt     integer NOT NULL,
    worker      text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('succeeded', 'retryable', 'dead', 'snoozed', 'released',
                                                 'lease_expired')),
    error_code  text,
    detail      text,   -- redacted before it is stored
    duration_ms integer NOT NULL DEFAULT 0
);
-- No foreign key on purpose: attempts are written in bulk on the hot path and
-- the pruner deletes them with their job.
CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, started_at);

CREATE TYPE effect_state AS ENUM ('started', 'confirmed');

-- The effect ledger: an external effect (an email sent, a webhook delivered) is
-- recorded as started before the provider is called and confirmed in the
-- transaction that marks its job succeeded.  A retry that finds a started,
-- unconfirmed effect reconciles with the provider before sending again.
CREATE TABLE effects (
    key          text PRIMARY KEY,
    job_id       uuid NOT NULL,
    tenant_id    uuid NOT NULL,
    provider     text NOT NULL,
    provider_ref text,
    state        effect_state NOT NULL DEFAULT 'started',
    created_at   timestamptz NOT NULL DEFAULT now(),
    confirmed_at timestamptz
);
CREATE INDEX effects_job_idx ON effects (job_id);

-- Live worker processes, for the dashboard and the "no live worker" alert.
CREATE TABLE workers (
    id           text PRIMARY KEY,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    queues       jsonb NOT NULL,      -- {"default": 8, ...} slots per queue
    version      text NOT NULL,
    state        text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopping')),
    is_leader    boolean NOT NULL DEFAULT false,
    running_jobs integer NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Handler statistics per minute, written in batches by each worker (keyed by
-- worker so that workers never contend on a row).  duration_hist counts
-- handler times in the buckets of opsboard.metrics.DURATION_BUCKETS_MS.
CREATE TABLE job_stats (
    minute          timestamptz NOT NULL,
    worker_id       text NOT NULL,
    queue           text NOT NULL,
    type            text NOT NULL,
    succeeded       integer NOT NULL DEFAULT 0,
    retried         integer NOT NULL DEFAULT 0,
    dead            integer NOT NULL DEFAULT 0,
    snoozed         integer NOT NULL DEFAULT 0,
    duration_ms_sum bigint NOT NULL DEFAULT 0,
    duration_hist   integer[] NOT NULL,
    PRIMARY KEY (minute, worker_id, queue, type)
);
