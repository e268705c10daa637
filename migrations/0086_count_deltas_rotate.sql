-- 0086: the depth counters' deltas without a dead-tuple stream (issue 48).
--
-- Every statement that changes jobs appends a few rows to job_count_deltas
-- (0044) and the leader's fold deletes them (queue_depth_fold): one dead tuple
-- per appended row, 25-30 % of the table dead in steady state with autovacuum
-- on, and all of it kept while anything holds the MVCC horizon (an idle
-- transaction, a long REPEATABLE READ report), so the fold and the recount
-- read an ever longer table.  PgQ's answer: rotate, and empty the old table
-- with TRUNCATE, which does not wait for the horizon.
--
-- job_count_deltas is now partitioned by slot (0 or 1).  The trigger writes
-- to the slot the sequence job_count_slot points at (last_value % 2: a
-- sequence, so that switching writes no row version and is seen by every
-- session at once, not at a commit).  The fold (opsboard.metrics.sample_depth)
-- advances the sequence, waits (lock_timeout) for the writers still in the
-- old slot with an ACCESS EXCLUSIVE lock on its partition, folds every row
-- as before (DELETE ... RETURNING over both slots: exact, whatever a slot
-- holds) and TRUNCATEs the old partition in the same transaction: its rows
-- and the dead versions of earlier folds go with its file.  A writer that
-- read the old slot just before the switch and inserts after the fold
-- committed leaves its rows there for a later fold: nothing is lost or
-- counted twice, only folded later.  When the lock is not granted in time
-- (a transaction that wrote deltas is left open), that fold deletes, as
-- before 0086, and the partition is truncated at a later turn.
--
-- Autovacuum is off on the partitions: they never need it (rows are deleted
-- and their pages truncated by the fold), and an autovacuum worker holding
-- its lock on a partition would make the fold's short lock wait time out.
-- Writers of jobs wait until this commits (their trigger writes the table
-- being replaced): the migration moves at most a fold's interval of rows.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE job_count_deltas RENAME TO job_count_deltas_0044;

CREATE SEQUENCE job_count_slot;
-- called once, so that the fold's nextval() - 1 is the slot the triggers read (last_value)
SELECT setval('job_count_slot', 1);

CREATE TABLE job_count_deltas (
    slot      smallint NOT NULL,
    queue     text NOT NULL,
    type      text NOT NULL,
    tenant_id uuid NOT NULL,
    status    job_status NOT NULL,
    delta     bigint NOT NULL,
    min_in    timestamptz,
    min_out   timestamptz
) PARTITION BY LIST (slot);
CREATE TABLE job_count_deltas_0 PARTITION OF job_count_deltas FOR VALUES IN (0)
    WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false);
CREATE TABLE job_count_deltas_1 PARTITION OF job_count_deltas FOR VALUES IN (1)
    WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false);

-- The same function as 0044's, each branch writing the current slot (read
-- inside the insert, an init plan: no query of its own per statement).
CREATE OR REPLACE FUNCTION jobs_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (slot, queue, type, tenant_id, status, delta, min_in)
        SELECT (SELECT last_value % 2 FROM job_count_slot), queue, type, tenant_id, status, count(*), min(available_at) FILTER (WHERE status <> 'dead')
        FROM new_rows WHERE status IN ('pending', 'retryable', 'dead')
        GROUP BY queue, type, tenant_id, status;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (slot, queue, type, tenant_id, status, delta, min_out)
        SELECT (SELECT last_value % 2 FROM job_count_slot), queue, type, tenant_id, status, -count(*), min(available_at) FILTER (WHERE status <> 'dead')
        FROM old_rows WHERE status IN ('pending', 'retryable', 'dead')
        GROUP BY queue, type, tenant_id, status;
    ELSE
        -- A row that stays in its group with the same available_at nets out
        -- and writes nothing (HAVING).
        INSERT INTO job_count_deltas (slot, queue, type, tenant_id, status, delta, min_in, min_out)
        SELECT (SELECT last_value % 2 FROM job_count_slot), queue, type, tenant_id, status, sum(d), min(t_in), min(t_out)
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

-- The deltas not folded yet move over.
INSERT INTO job_count_deltas (slot, queue, type, tenant_id, status, delta, min_in, min_out)
SELECT (SELECT last_value % 2 FROM job_count_slot), queue, type, tenant_id, status, delta, min_in, min_out
FROM job_count_deltas_0044;
DROP TABLE job_count_deltas_0044;
