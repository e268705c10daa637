-- 0044: maintained queue depth (issue 24).
--
-- The leader's depth sampler recounted every unfinished and dead job into
-- queue_depth: 846 ms at 1,000,000 pending, growing with the backlog.  Now
-- every statement that changes jobs appends its net change per (queue, type,
-- tenant, status) to job_count_deltas (statement-level triggers over the
-- transition tables: one aggregate and at most a few small rows per
-- statement, never a per-job row or a lock on a shared counter row), and the
-- leader folds those rows into queue_depth (opsboard/sql/limits.sql:
-- queue_depth_fold): a delete and an upsert in one transaction, so a fold cut
-- short commits nothing and the rows stay for the next one.  The fold's cost
-- follows the work done since the last fold, not the backlog.
--
-- Counted here: pending, retryable and dead.  Running jobs are few (the
-- workers' slots and prefetch) and are recounted by the fold from the running
-- index; succeeded and cancelled jobs are not shown, so completing or pruning
-- them writes no delta.
--
-- queue_depth.oldest_ready now holds the earliest available_at among the
-- group's waiting (pending or retryable) jobs, due or not; readers show it
-- only once it is due.  A job entering the group lowers it (least); a job
-- leaving at or below it marks it stale (oldest_stale), and the fold re-reads
-- a bounded number of stale groups per run (queue_depth_oldest_refresh).
CREATE TABLE job_count_deltas (
    queue     text NOT NULL,
    type      text NOT NULL,
    tenant_id uuid NOT NULL,
    status    job_status NOT NULL CHECK (status IN ('pending', 'retryable', 'dead')),
    delta     bigint NOT NULL,
    min_in    timestamptz,  -- earliest available_at of the waiting jobs that entered the group
    min_out   timestamptz   -- earliest available_at of the waiting jobs that left it
);

ALTER TABLE queue_depth ADD COLUMN oldest_stale boolean NOT NULL DEFAULT false;

CREATE FUNCTION jobs_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (queue, type, tenant_id, status, delta, min_in)
        SELECT queue, type, tenant_id, status, count(*), min(available_at) FILTER (WHERE status <> 'dead')
        FROM new_rows WHERE status IN ('pending', 'retryable', 'dead')
        GROUP BY queue, type, tenant_id, status;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (queue, type, tenant_id, status, delta, min_out)
        SELECT queue, type, tenant_id, status, -count(*), min(available_at) FILTER (WHERE status <> 'dead')
        FROM old_rows WHERE status IN ('pending', 'retryable', 'dead')
        GROUP BY queue, type, tenant_id, status;
    ELSE
        -- A row that stays in its group with the same available_at nets out
        -- and writes nothing (HAVING).
        INSERT INTO job_count_deltas (queue, type, tenant_id, status, delta, min_in, min_out)
        SELECT queue, type, tenant_id, status, sum(d), min(t_in), min(t_out)
        FROM (SELECT queue, type, tenant_id, status, -1 AS d, NULL::timestamptz AS t_in,
                     CASE WHEN status <> 'dead' THEN available_at END AS t_out
              FROM old_rows WHERE status IN ('pending', 'retryable', 'dead')
              UNION ALL
              SELECT queue, type, tenant_id, status, 1, CASE WHEN status <> 'dead' THEN available_at END, NULL
              FROM new_rows WHERE status IN ('pending', 'retryable', 'dead')) x
        GROUP BY queue, type, tenant_id, status
        HAVING sum(d) <> 0 OR min(t_in) IS DISTINCT FROM min(t_out);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_count_deltas_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();
CREATE TRIGGER jobs_count_deltas_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();
CREATE TRIGGER jobs_count_deltas_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_deltas();

-- TRUNCATE jobs (tests, benchmarks) empties the counts with it.
CREATE FUNCTION jobs_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_count_deltas;
    DELETE FROM queue_depth;
    DELETE FROM queue_depth_totals;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_count_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_count_truncate();

-- Start from an exact count: writers wait (SHARE blocks their row changes)
-- until this migration commits, so no change falls between the count and the
-- triggers.
LOCK TABLE jobs IN SHARE MODE;
DELETE FROM queue_depth;
INSERT INTO queue_depth (queue, type, tenant_id, status, jobs, oldest_ready, sampled_at)
SELECT queue, type, tenant_id, status, count(*), min(available_at) FILTER (WHERE status <> 'dead'), now()
FROM jobs WHERE status IN ('pending', 'retryable', 'dead')
GROUP BY queue, type, tenant_id, status;

-- When the leader last folded: the dashboard's "depth sampled at" (a fold
-- that changes no group still counts as a fresh sample).  One row, written
-- only by the leader.
CREATE TABLE queue_depth_folds (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    folded_at timestamptz NOT NULL
);
INSERT INTO queue_depth_folds (folded_at) VALUES (now());

-- The earliest available_at of the last fold's leaving jobs (the fold compares
-- it with the stored oldest_ready to tell a stale one).
ALTER TABLE queue_depth ADD COLUMN last_out timestamptz;
-- Room on each page for the fold's updates to stay HOT (the changed columns
-- are in no index but queue_depth_oldest_idx).
ALTER TABLE queue_depth SET (fillfactor = 70);
-- The fold's recount of running groups finds the old ones without a scan.
CREATE INDEX queue_depth_running_idx ON queue_depth (queue, type, tenant_id) WHERE status = 'running';
-- A tenant-scoped page reads its tenants' groups only.
CREATE INDEX queue_depth_tenant_idx ON queue_depth (tenant_id);
-- The oldest waiting job per queue, type and status: one probe each, not a
-- read of every tenant's group.
CREATE INDEX queue_depth_oldest_idx ON queue_depth (queue, type, status, oldest_ready)
    WHERE oldest_ready IS NOT NULL;

-- Per queue, type and status over every tenant, kept by the fold beside
-- queue_depth: what /metrics and the operators' queue health read (a few
-- rows, whatever the number of tenants).
CREATE TABLE queue_depth_totals (
    queue  text NOT NULL,
    type   text NOT NULL,
    status job_status NOT NULL,
    jobs   bigint NOT NULL,
    PRIMARY KEY (queue, type, status)
);
INSERT INTO queue_depth_totals (queue, type, status, jobs)
SELECT queue, type, status, sum(jobs) FROM queue_depth GROUP BY queue, type, status;
