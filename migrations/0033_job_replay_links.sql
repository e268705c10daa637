-- A dead job replayed by a job that does not name it in replay_of.  Replaying
-- a dead job whose idempotency key is already held by a live job (the replay
-- of another dead job with the same key, in the same bulk replay or earlier,
-- or the producer's own new job) creates nothing: that live job is the
-- replay.  Without a record of it the dead job stayed "never replayed" and
-- open while the audit log named its replay.  One row per (dead job, the job
-- that replays it); replay_of stays the record of the job a replay created.
CREATE TABLE job_replay_links (
    dead_job_id uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dead_job_id, job_id)
);
CREATE INDEX job_replay_links_job_idx ON job_replay_links (job_id);

-- The replays recorded before this table: audited job.replay rows whose job
-- does not name the dead job in replay_of.
INSERT INTO job_replay_links (dead_job_id, job_id, at)
SELECT DISTINCT ON (d.id, r.id) d.id, r.id, a.at
FROM audit_log a
JOIN jobs d ON d.id::text = a.target_id
JOIN jobs r ON r.id::text = a.after ->> 'job_id'
WHERE a.action = 'job.replay' AND a.target_type = 'job'
  AND r.replay_of IS DISTINCT FROM d.id
ON CONFLICT DO NOTHING;
