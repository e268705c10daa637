-- 0052: less server work per enqueue (issue 24: single enqueue >= 1.2x and batch
-- enqueue >= 1.5x pgqueuer's; docs/performance.md, "Enqueue cost, part 2").
--
-- 1. The replay_of check (0045) ran as a query in every inserting statement's
--    trigger, over the transition table, although almost no job names a
--    replayed one: one of the three queries that trigger ran per enqueue
--    (EXPLAIN ANALYZE of a single insert, median of 500: the trigger 0.047 ->
--    0.036 ms).  It is now a row-level trigger whose WHEN clause skips every job
--    without replay_of (evaluated in C, no function call, no query), with the
--    same check, lock and error as before (job_references_exist, 0045: the same
--    SQLSTATE 23503, constraint name jobs_replay_of_fkey and detail).  A replay
--    inserts one job at a time, so one probe per such row costs what the
--    statement's probe cost.
CREATE OR REPLACE FUNCTION jobs_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing uuid;
BEGIN
    SELECT n.tenant_id INTO missing
    FROM (SELECT DISTINCT tenant_id FROM new_jobs) n
         LEFT JOIN LATERAL (SELECT true AS found FROM tenants t WHERE t.id = n.tenant_id FOR KEY SHARE) t ON true
    WHERE t.found IS NULL
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert or update on table "jobs" violates foreign key constraint "jobs_tenant_id_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_tenant_id_fkey', TABLE = 'jobs',
                  SCHEMA = 'public', DETAIL = format('Key (tenant_id)=(%s) is not present in table "tenants".', missing);
    END IF;
    PERFORM pg_notify('opsboard_jobs', q.queue) FROM (SELECT DISTINCT queue FROM new_jobs) q;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_replay_of_exists AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.replay_of IS NOT NULL) EXECUTE FUNCTION job_references_exist('replay_of');

-- 2. No deduplication pass on the two ready indexes.  Their keys end with the
--    job's id and its due time, so a key repeats only when a job returns to
--    the ready set with the same due time (a release at shutdown), and a
--    deduplication pass before each page split looked for equal keys it
--    practically never found: 5 % of a COPY of 1,000 jobs' server CPU (perf:
--    _bt_dedup_pass and _bt_keep_natts_fast) for nothing saved.  Bottom-up
--    deletion of dead versions does not depend on this setting.  The other
--    indexes keep it: jobs_tenant_idx repeats (tenant_id, id) on every non-HOT
--    update and jobs_status_listed_idx (status, id) on every retry, and those
--    versions do merge.  Existing entries stay as they are; only later page
--    splits change.
ALTER INDEX jobs_ready_idx SET (deduplicate_items = off);
ALTER INDEX jobs_ready_type_idx SET (deduplicate_items = off);

-- 3. job_count_deltas loses its CHECK on status.  PostgreSQL 15 reads a table's
--    CHECK expressions from the catalogue and plans them again in every
--    statement that writes the table (ExecRelCheck: stringToNode, then
--    expression_planner), and the count-delta trigger (0044) writes this table
--    once per statement that changes jobs: every enqueue, claim and outcome
--    batch.  Measured with callgrind on a single enqueue (postgres --single,
--    the same prepared insert): 745,600 -> 712,400 instructions per enqueue,
--    4.5 %.  The rule it checked holds by construction: the table's only
--    writer is jobs_count_deltas(), whose every branch selects
--    status IN ('pending', 'retryable', 'dead') (and the fold only deletes);
--    tests/integration/test_enqueue_cost.py checks the rows after every kind
--    of change.  jobs' own CHECKs stay: they guard what many writers do.
ALTER TABLE job_count_deltas DROP CONSTRAINT job_count_deltas_status_check;
