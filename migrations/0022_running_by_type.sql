-- Running jobs by type, for the claim's concurrency-limit room (job_claim_many:
-- `count(*) ... WHERE r.status = 'running' AND r.type = ...`).
--
-- Without it those counts read jobs_running_idx (by lease), which holds an
-- entry for every job that ran since the last vacuum: under a flood of one
-- type, every claim walked tens of thousands of dead entries once per limited
-- type and provider, two thirds of the claim's time (EXPLAIN ANALYZE, 52,000
-- pending no-op jobs: 31 ms -> 10 ms per 200-job claim).  By type, a limited
-- type's count reads only its own entries.
CREATE INDEX jobs_running_type_idx ON jobs (type) WHERE status = 'running';
