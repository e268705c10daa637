-- 0051: the claim's and the outcomes' updates of `jobs` by key, whatever the plan's age (issue 27).
--
-- job_claim_many updates its locked rows by `ctid = ANY (ARRAY(...))` and job_record_outcomes its
-- jobs by `id = ANY (ARRAY(...))`.  For such an array the planner guesses ten elements and weighs a
-- probe per element (a TID scan, a primary-key scan) against a sequential scan of the table as big
-- as it is when the plan is made.  A worker prepares both statements (psycopg, after a few runs) and
-- PostgreSQL keeps one generic plan per connection until something invalidates it (an ANALYZE or
-- VACUUM of jobs); a plan made while jobs held a few hundred rows is a sequential scan, and it stays
-- one while a broadcast writes hundreds of thousands of jobs: every claim and every completion read
-- the whole table (`opsboard bench --scenario broadcast --jobs 60000` on a server with autovacuum
-- off: 1,481 claims of 15-60 ms, the largest share of PostgreSQL's CPU in the run).
--
-- opsboard_key_probe(x) is always true.  Its declared cost is what it is for: a sequential scan
-- would evaluate it for every row of the table, a probe for the probed rows only, so the probe is
-- the cheaper plan at every size of the table, however small.  PL/pgSQL so that it is never inlined
-- (an inlined `true` would take its cost with it).
CREATE FUNCTION opsboard_key_probe(anyelement) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 10000
    AS $$ BEGIN RETURN true; END $$;
