-- Lifetime job outcome totals per queue and type, behind the Prometheus counter
-- opsboard_jobs_completed.  job_stats keeps per-minute rows for a while and the
-- pruner deletes old ones; a counter summed over those rows alone would go
-- down.  The pruner folds the rows it deletes into this table in the same
-- statement, so (totals + kept rows) never decreases.  Workers never write
-- here: the per-minute statistics flush, on the hot path, is unchanged.
CREATE TABLE job_stats_totals (
    queue     text NOT NULL,
    type      text NOT NULL,
    succeeded bigint NOT NULL DEFAULT 0,
    retried   bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    snoozed   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, type)
);
