-- 0094: the queue's history for the dashboard's charts (issue 44).
--
-- The charts over 24 hours and 7 days read this rollup instead of
-- job_stats' per-minute, per-worker rows (24 hours of those are 1,440 x
-- workers x types rows whose histograms were unnested on every page view:
-- 300 ms for the 24-hour charts of 2 workers x 4 types) or the jobs
-- themselves.  Written only by the leader's history service
-- (worker/services/history.py, opsboard.history.roll_up) from what exists
-- already: it recomputes the current and the previous bucket from job_stats
-- and samples queue_depth_totals (the depth fold's totals).  The completion
-- path writes nothing more.
--
-- Platform-wide, like job_stats: no tenant_id (the charts are for operator
-- staff; a tenant's own chart reads its attempts).

-- Per 15-minute bucket (aligned on 2000-01-01 UTC), queue and type: the
-- handler outcomes and their time histogram (the cells of
-- opsboard.metrics.DURATION_BUCKETS_MS, summed over workers and minutes),
-- and the depth the samples saw in the bucket (peak of waiting, pending +
-- retryable; dead jobs at the latest sample; NULL: no sample in it).
CREATE TABLE job_history (
    bucket        timestamptz NOT NULL,
    queue         text NOT NULL,
    type          text NOT NULL,
    succeeded     bigint NOT NULL DEFAULT 0,
    retried       bigint NOT NULL DEFAULT 0,
    dead          bigint NOT NULL DEFAULT 0,
    duration_hist bigint[] NOT NULL DEFAULT '{}',
    waiting       bigint,
    dead_jobs     bigint,
    PRIMARY KEY (bucket, queue, type)
);

-- The depth per minute, queue and type for the one-hour charts (the
-- counts of that range come from job_stats' minutes directly); kept two
-- days.
CREATE TABLE job_depth_minutes (
    minute    timestamptz NOT NULL,
    queue     text NOT NULL,
    type      text NOT NULL,
    waiting   bigint NOT NULL,
    dead_jobs bigint NOT NULL,
    PRIMARY KEY (minute, queue, type)
);

-- The week the statistics already hold goes into the rollup at once.
INSERT INTO job_history (bucket, queue, type, succeeded, retried, dead, duration_hist)
SELECT c.bucket, c.queue, c.type, c.succeeded, c.retried, c.dead, coalesce(h.hist, '{}')
FROM (SELECT date_bin(interval '15 minutes', minute, timestamptz '2000-01-01 00:00+00') AS bucket, queue, type,
             sum(succeeded)::bigint AS succeeded, sum(retried)::bigint AS retried, sum(dead)::bigint AS dead
      FROM job_stats WHERE minute >= now() - interval '8 days'
      GROUP BY 1, 2, 3) c
LEFT JOIN (SELECT bucket, queue, type, array_agg(v ORDER BY i) AS hist
           FROM (SELECT date_bin(interval '15 minutes', s.minute, timestamptz '2000-01-01 00:00+00') AS bucket,
                        s.queue, s.type, h.i, sum(h.v)::bigint AS v
                 FROM job_stats s CROSS JOIN LATERAL unnest(s.duration_hist) WITH ORDINALITY AS h(v, i)
                 WHERE s.minute >= now() - interval '8 days'
                 GROUP BY 1, 2, 3, 4) cells
           GROUP BY 1, 2, 3) h USING (bucket, queue, type);
