-- 0066: the claim passes over a held type's jobs whatever the planner's statistics say (issue 27).
--
-- With a hold in force, opsboard_ready_jobs (0039) walks a tenant's ready types through
-- jobs_ready_type_idx (queue, tenant_id, type, ...) and takes each unheld type's next jobs.  Both
-- steps can also be served by jobs_ready_idx (queue, tenant_id, priority, ...): a range scan of the
-- whole tenant, filtered by type, then sorted.  Which one the planner takes rests on its estimates
-- alone, and while jobs has no statistics (a database loaded before autovacuum or ANALYZE reached
-- it: the broadcast bench, a restore, a fresh install's first big send) it estimates one row for
-- either and takes the narrower jobs_ready_idx.  EXPLAIN ANALYZE of job_claim_many with 600,000
-- held deliveries in one tenant and no statistics: 1.7 s per claim, 300,050 rows read and sorted
-- for the type walk's first step and 300,000 removed by the filter of each type's scan; every
-- claim that reached the tenant paid it (33-115 s of claim time per `opsboard bench --scenario
-- broadcast`, another tenant's notifications over a second late).
--
-- The held arm now runs in opsboard_ready_jobs_held, a PL/pgSQL function (its plan prepared once
-- per connection) with enable_sort off: the plans through jobs_ready_type_idx need no sort but the
-- final merge of the types' jobs, those through jobs_ready_idx need one per step, so they lose
-- however few rows the planner believes there are (and jit off: the penalty of that one sort would
-- pass jit_above_cost, 0.18 s of compiling per call where the session has not turned jit off).  Each type's scan bounds the type from both
-- sides (>= and <=, the same rows as = under a deterministic collation) instead of by equality, so
-- that its ORDER BY keeps the type: with "=" against the walk's value (a constant inside the
-- lateral scan) the planner drops that key, and jobs_ready_idx, filtered by type, needs no sort
-- either.  Otherwise the same statement as before, so the same rows in the same order; without a
-- hold nothing changes (the inlined range scan of 0039, and the function is not called: a one-time
-- filter).  ROWS 1: the estimate of the union does not see that filter, and with PL/pgSQL's default
-- of 1,000 rows a call the generic plan of the worker's prepared claim looked dearer than a plan for
-- the values at hand, so PostgreSQL planned the claim again at every run (pg_prepared_statements: 15
-- custom plans, no generic one, in 15 runs): 0.6 -> 1.7 ms per claim of 64 on a small database, an idle
-- worker's enqueue -> start p50 1.7 -> 3.0 ms (`opsboard bench --peers`), until this was added.
CREATE FUNCTION opsboard_ready_jobs_held(p_queue text, p_tenant uuid, p_take integer, p_held text[],
                                         p_now timestamptz)
RETURNS TABLE (id uuid, type text, priority smallint, available_at timestamptz)
LANGUAGE plpgsql STABLE ROWS 1 SET enable_sort = off SET jit = off AS $$
BEGIN
    RETURN QUERY
    WITH RECURSIVE types AS (
        (SELECT j.type FROM jobs j
         WHERE j.queue = p_queue AND j.tenant_id = p_tenant AND j.status IN ('pending', 'retryable')
         ORDER BY j.type LIMIT 1)
        UNION ALL
        SELECT (SELECT j.type FROM jobs j
                WHERE j.queue = p_queue AND j.tenant_id = p_tenant AND j.status IN ('pending', 'retryable')
                  AND j.type > s.type
                ORDER BY j.type LIMIT 1)
        FROM types s WHERE s.type IS NOT NULL
    )
    SELECT c.id, c.type, c.priority, c.available_at
    FROM types s
    CROSS JOIN LATERAL (
        SELECT j.id, j.type, j.priority, j.available_at FROM jobs j
        WHERE j.queue = p_queue AND j.tenant_id = p_tenant AND j.type >= s.type AND j.type <= s.type
          AND j.status IN ('pending', 'retryable')
          AND j.available_at <= p_now AND (j.expires_at IS NULL OR j.expires_at > p_now)
          AND (j.group_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobs g
                WHERE g.tenant_id = j.tenant_id AND g.group_key = j.group_key
                  AND g.status IN ('pending', 'running', 'retryable') AND g.id < j.id))
        ORDER BY j.type, j.priority, j.available_at, j.id
        LIMIT p_take
    ) c
    WHERE s.type IS NOT NULL AND s.type <> ALL (p_held)
    ORDER BY c.priority, c.available_at, c.id
    LIMIT p_take;
END
$$;

CREATE OR REPLACE FUNCTION opsboard_ready_jobs(p_queue text, p_tenant uuid, p_take integer, p_held text[],
                                               p_now timestamptz)
RETURNS TABLE (id uuid, type text, priority smallint, available_at timestamptz)
LANGUAGE sql STABLE AS $$
    (SELECT j.id, j.type, j.priority, j.available_at FROM jobs j
     WHERE cardinality(p_held) = 0
       AND j.queue = p_queue AND j.tenant_id = p_tenant AND j.status IN ('pending', 'retryable')
       AND j.available_at <= p_now AND (j.expires_at IS NULL OR j.expires_at > p_now)
       AND (j.group_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM jobs g
             WHERE g.tenant_id = j.tenant_id AND g.group_key = j.group_key
               AND g.status IN ('pending', 'running', 'retryable') AND g.id < j.id))
     ORDER BY j.priority, j.available_at, j.id
     LIMIT p_take)
    UNION ALL
    SELECT h.id, h.type, h.priority, h.available_at
    FROM opsboard_ready_jobs_held(p_queue, p_tenant, p_take, p_held, p_now) h
    WHERE cardinality(p_held) > 0
$$;
