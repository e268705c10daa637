-- 0045: the four foreign keys that point at jobs, checked once per statement
-- instead of once per row (issue 24: the pruner).
--
-- jobs.replay_of -> jobs (NO ACTION), job_resolutions.job_id -> jobs (CASCADE),
-- job_replay_links.dead_job_id and .job_id -> jobs (CASCADE) each ran one RI
-- trigger per deleted job: 384 of the 485 ms of a 5,000-job batch of the
-- pruner's DELETE (EXPLAIN (ANALYZE, BUFFERS, WAL)).  What they guaranteed is
-- kept, with the same SQLSTATE (23503, foreign_key_violation), constraint names
-- and message shapes as PostgreSQL's, as 0024 did for jobs.tenant_id:
--   * deleting jobs deletes their resolutions and replay links: one set-based
--     DELETE per referencing column, in a statement-level AFTER DELETE trigger
--     over the deleted rows (transition table);
--   * a job that a surviving job names in replay_of cannot be deleted (deleted
--     with its referrer in the same statement, it can); checked by the same
--     trigger;
--   * a job's replay_of names an existing job when set: checked once per
--     inserting statement by jobs_notify_insert (0024) over its transition
--     table, taking FOR KEY SHARE on the distinct referenced jobs;
--   * a resolution or replay link names existing jobs: row-level checks (the
--     tables are small and written one row at a time by an operator's action),
--     taking FOR KEY SHARE on the jobs as the RI check did;
--   * a job's id and replay_of never change (stricter than the keys, which
--     allowed an unreferenced id or a valid replay_of to change; nothing does).
--
-- Concurrency, as the RI triggers: an insert that references a job takes
-- FOR KEY SHARE on it.  If it does so first, the delete of that job waits for
-- the inserting transaction, and the delete trigger's statements (each with a
-- fresh snapshot under READ COMMITTED) then see the committed referrer: the
-- resolution or link is cascaded, the replay refuses the delete.  If the
-- delete comes first, the insert's lock waits for it, then finds the job gone:
-- 23503.  The trigger's statements see every committed row only under READ
-- COMMITTED; jobs are therefore deleted only in a READ COMMITTED transaction
-- (the default; the pruner and the tests use it).
--
-- DROP CONSTRAINT takes no name the previous release's code reads (the names
-- live on in the errors raised below).

ALTER TABLE jobs DROP CONSTRAINT jobs_replay_of_fkey;
ALTER TABLE job_resolutions DROP CONSTRAINT job_resolutions_job_id_fkey;
ALTER TABLE job_replay_links DROP CONSTRAINT job_replay_links_dead_job_id_fkey;
ALTER TABLE job_replay_links DROP CONSTRAINT job_replay_links_job_id_fkey;

-- 0024's insert trigger, plus the replay_of check (skipped without a scan of
-- the referenced side when no inserted job names one: the usual enqueue).
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
    SELECT n.replay_of INTO missing
    FROM (SELECT DISTINCT replay_of FROM new_jobs WHERE replay_of IS NOT NULL) n
         LEFT JOIN LATERAL (SELECT true AS found FROM jobs j WHERE j.id = n.replay_of FOR KEY SHARE) j ON true
    WHERE j.found IS NULL
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert or update on table "jobs" violates foreign key constraint "jobs_replay_of_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_replay_of_fkey', TABLE = 'jobs',
                  SCHEMA = 'public', DETAIL = format('Key (replay_of)=(%s) is not present in table "jobs".', missing);
    END IF;
    PERFORM pg_notify('opsboard_jobs', q.queue) FROM (SELECT DISTINCT queue FROM new_jobs) q;
    RETURN NULL;
END;
$$;

-- Only fired by an UPDATE that sets id or replay_of (the claim and the
-- outcomes set neither): no cost to them.
CREATE FUNCTION jobs_keys_are_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a job''s id and replay_of cannot be changed (job %)', OLD.id
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_replay_of_fkey', TABLE = 'jobs',
              SCHEMA = 'public';
END;
$$;
CREATE TRIGGER jobs_keys_are_fixed
    BEFORE UPDATE OF id, replay_of ON jobs FOR EACH ROW
    WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.replay_of IS DISTINCT FROM NEW.replay_of)
    EXECUTE FUNCTION jobs_keys_are_fixed();

CREATE FUNCTION jobs_delete_references() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone uuid;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'delete jobs in a READ COMMITTED transaction'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- Joined to the transition table (the planner knows its row count): a
    -- hash of the few referencing rows, or an index probe per deleted job.
    DELETE FROM job_resolutions r USING old_jobs o WHERE r.job_id = o.id;
    DELETE FROM job_replay_links l USING old_jobs o WHERE l.dead_job_id = o.id;
    DELETE FROM job_replay_links l USING old_jobs o WHERE l.job_id = o.id;
    -- A surviving replay of a deleted job (jobs deleted by this statement are
    -- no longer seen here: deleted with its referrer, a job may go).
    SELECT o.id INTO gone FROM old_jobs o JOIN jobs j ON j.replay_of = o.id LIMIT 1;
    IF gone IS NOT NULL THEN
        RAISE EXCEPTION 'update or delete on table "jobs" violates foreign key constraint "jobs_replay_of_fkey" on table "jobs"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'jobs_replay_of_fkey', TABLE = 'jobs',
                  SCHEMA = 'public', DETAIL = format('Key (id)=(%s) is still referenced from table "jobs".', gone);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_delete_references AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_delete_references();

-- TRUNCATE jobs (tests, benchmarks; CASCADE reached these tables through the
-- keys) empties them with it.
CREATE FUNCTION jobs_truncate_references() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_resolutions;
    DELETE FROM job_replay_links;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_truncate_references AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_truncate_references();

-- The referencing side of job_resolutions and job_replay_links.
CREATE FUNCTION job_references_exist() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text;
    key uuid;
BEGIN
    FOREACH col IN ARRAY TG_ARGV LOOP
        key := (to_jsonb(NEW) ->> col)::uuid;
        PERFORM 1 FROM jobs WHERE id = key FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
                    TG_TABLE_NAME, TG_TABLE_NAME || '_' || col || '_fkey'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_TABLE_NAME || '_' || col || '_fkey',
                      TABLE = TG_TABLE_NAME, SCHEMA = 'public',
                      DETAIL = format('Key (%s)=(%s) is not present in table "jobs".', col, key);
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
CREATE TRIGGER job_resolutions_job_exists AFTER INSERT OR UPDATE OF job_id ON job_resolutions
    FOR EACH ROW EXECUTE FUNCTION job_references_exist('job_id');
CREATE TRIGGER job_replay_links_jobs_exist AFTER INSERT OR UPDATE OF dead_job_id, job_id ON job_replay_links
    FOR EACH ROW EXECUTE FUNCTION job_references_exist('dead_job_id', 'job_id');
