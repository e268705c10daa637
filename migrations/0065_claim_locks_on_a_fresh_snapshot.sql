-- 0065: the claim locks and updates its jobs in a statement of its own, on a fresh snapshot (issue 24).
--
-- job_claim_many chooses its candidates (the fair tenant walk, the limits) and used to lock them in
-- the same statement, on that statement's snapshot.  With two workers, a candidate the other worker
-- claimed (and committed) after that snapshot was taken is still "pending" in it: FOR UPDATE follows
-- the row to its newest version, and PostgreSQL re-checks that version with EvalPlanQual, which
-- builds execution state for every subplan of the whole statement (the walk's, the limits', the
-- weights'), once per such row.  perf on the backends during `opsboard bench --scenario process_2`
-- (60,000 jobs): EvalPlanQualBegin 11 % of PostgreSQL's CPU with 2 workers, 0.2 % with 1.
--
-- opsboard_claim_locked(ids in fair order, how many, worker, lease, now) does the locking and the
-- update.  A VOLATILE PL/pgSQL function's statement takes a snapshot of its own when it starts
-- (READ COMMITTED), so a job another claim committed in the meantime is seen as it is now (running)
-- and left without a re-check, and the re-checks that remain (a commit in the microseconds between
-- that snapshot and the lock) build the state of this small statement only.  Its plan is prepared
-- once per connection by PL/pgSQL.  Same rules as before: candidates are locked in the order given,
-- one primary-key probe each (OFFSET 0 keeps the status check out of the probe, see jobs.sql), rows
-- another claim holds are skipped, the status is checked on the locked row, and the locked rows are
-- updated by ctid.  A plan made while jobs held a page of analyzed rows, which PL/pgSQL keeps for
-- the connection, probed jobs with a sequential scan per candidate (so did job_claim_many's own
-- lock step before this migration: 0051's test looked at the update only).  The function runs with
-- enable_seqscan off, so that its plans reach jobs by key at any size of the table: what
-- opsboard_key_probe (0051) does elsewhere, without its PL/pgSQL call per probed and per updated
-- row (callgrind: 1.35 % of the server's instructions per claimed and completed job).
CREATE FUNCTION opsboard_claim_locked(p_ids uuid[], p_limit integer, p_worker text, p_lease float8,
                                      p_now timestamptz)
RETURNS TABLE (id uuid, type text, version smallint, tenant_id uuid, queue text, priority smallint,
               payload jsonb, attempts integer, max_attempts integer, idempotency_key text, group_key text,
               correlation_id text, event_id uuid, expires_at timestamptz, created_at timestamptz,
               started_at timestamptz, locked_until timestamptz)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH locked AS (
        SELECT l.ctid
        FROM unnest(p_ids) AS a(id)
        CROSS JOIN LATERAL (
            SELECT j.status, j.ctid FROM jobs j
            WHERE j.id = a.id
            OFFSET 0
            FOR UPDATE SKIP LOCKED
        ) l
        WHERE l.status IN ('pending', 'retryable')
        LIMIT p_limit
    )
    UPDATE jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        locked_by = p_worker,
        locked_until = coalesce(p_now, statement_timestamp()) + make_interval(secs => p_lease),
        started_at = coalesce(p_now, statement_timestamp())
    WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM locked))
    RETURNING j.id, j.type, j.version, j.tenant_id, j.queue, j.priority, j.payload, j.attempts, j.max_attempts,
              j.idempotency_key, j.group_key, j.correlation_id, j.event_id, j.expires_at, j.created_at,
              j.started_at, j.locked_until;
END
$$;
