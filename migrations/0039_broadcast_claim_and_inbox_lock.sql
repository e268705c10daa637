-- 0039: a broadcast to 600,000 members (issue 27, `opsboard bench --scenario broadcast`).
--
-- 1. The claim passes over held job types without reading their jobs.
-- 2. A delivery's foreign key to its inbox row may be checked at the commit.
--
-- 1.
-- A held type's jobs stay pending in their place (0027), and the claim used to
-- filter them out of each tenant's range scan of jobs_ready_idx: a claim that
-- reached a tenant with 600,000 held jobs (a broadcast's email deliveries under
-- a pause of notifications.deliver) read all of them, 63 ms per claim at 30,000
-- (EXPLAIN ANALYZE of job_claim_many, `opsboard bench --scenario broadcast`),
-- and every claim of that queue paid it.  With a hold in force, the claim now
-- walks the tenant's ready types (one probe per type present) through a second
-- ready index that leads with the type, takes each unheld type's next jobs and
-- merges them: its cost is in types and batch size, not in held jobs.  Without
-- a hold the claim reads jobs_ready_idx exactly as before.  The price: one more
-- index entry per pending or retryable job version.
CREATE INDEX jobs_ready_type_idx ON jobs (queue, tenant_id, type, priority, available_at, id)
    WHERE status IN ('pending', 'retryable');

-- One tenant's next claimable jobs of a queue, at most p_take, by priority then
-- age (job_claim_many's per-tenant step): due, not expired, not behind an older
-- unfinished job of their group, not of a held type (p_held).  Two arms, of
-- which a one-time filter runs one: no hold -- a range scan of jobs_ready_idx in
-- its own order; holds -- a skip scan over the tenant's ready types
-- (jobs_ready_type_idx), a range scan per unheld type, merged.  A function so
-- that the claim statement stays under psycopg's 4096-byte statement cache;
-- SQL, STABLE and not STRICT, so the planner inlines it into the claim.
CREATE FUNCTION opsboard_ready_jobs(p_queue text, p_tenant uuid, p_take integer, p_held text[],
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
    (WITH RECURSIVE types AS (
        (SELECT j.type FROM jobs j
         WHERE cardinality(p_held) > 0
           AND j.queue = p_queue AND j.tenant_id = p_tenant AND j.status IN ('pending', 'retryable')
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
        WHERE j.queue = p_queue AND j.tenant_id = p_tenant AND j.type = s.type
          AND j.status IN ('pending', 'retryable')
          AND j.available_at <= p_now AND (j.expires_at IS NULL OR j.expires_at > p_now)
          AND (j.group_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM jobs g
                WHERE g.tenant_id = j.tenant_id AND g.group_key = j.group_key
                  AND g.status IN ('pending', 'running', 'retryable') AND g.id < j.id))
        ORDER BY j.priority, j.available_at, j.id
        LIMIT p_take
     ) c
     WHERE cardinality(p_held) > 0 AND s.type IS NOT NULL AND s.type <> ALL (p_held)
     ORDER BY c.priority, c.available_at, c.id
     LIMIT p_take)
$$;

-- 2. The fan-out writes a page's deliveries and deliver jobs first and its inbox
-- rows last, right after taking the inbox lock (notification_insert_lock: seq
-- order is commit order), so that the lock is held for the inbox insert and the
-- commit, not for the whole page (1.6 s of every 5,000-member page before: every
-- other tenant's notification waited behind it).  The deliveries name inbox rows
-- that do not exist yet when they are written, so this foreign key is checked
-- at the commit (the fan-out is the only writer of deliveries; a delivery naming
-- a missing inbox row still fails its transaction).
ALTER TABLE deliveries ALTER CONSTRAINT deliveries_notification_id_fkey DEFERRABLE INITIALLY DEFERRED;
