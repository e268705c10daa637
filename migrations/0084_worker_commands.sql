-- 0084: per-process controls on the Workers page (issue 44): quiet a worker
-- (it stops claiming and finishes what it runs), stop it (a graceful drain, as
-- SIGTERM), or set one worker's slots per queue.
--
-- One row per worker holds what the operator asked of it: a desired state, not
-- a queue of messages, so a command given twice is the same command, a worker
-- that missed a notification reads it at its next poll, and nothing is left to
-- replay.  Keyed by the worker's id, with no foreign key to workers: a worker
-- deletes its row when it stops cleanly, and the command must outlive a
-- restart of the row (a quiet worker that re-registers stays quiet).  The
-- worker deletes its own command row when it stops.
--
-- quiet: claim nothing while true.
-- stop_requested_at: set once; the worker drains and exits (its supervisor or
--   systemd decides whether to start another).
-- slots: {"queue": n} for the queues this worker's slots are set for; a queue
--   not named keeps the operator's live queue setting or the worker's own.
CREATE TABLE worker_commands (
    worker_id          text PRIMARY KEY,
    quiet              boolean NOT NULL DEFAULT false,
    stop_requested_at  timestamptz,
    slots              jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(slots) = 'object'),
    updated_by         text,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- Every change wakes the worker it names (its listener's waiter on this
-- channel, keyed by its id); the worker also polls, so a lost notification
-- only delays a command.
CREATE FUNCTION worker_commands_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opsboard_workers', NEW.worker_id);
    RETURN NULL;
END $$;

CREATE TRIGGER worker_commands_notify AFTER INSERT OR UPDATE ON worker_commands
    FOR EACH ROW EXECUTE FUNCTION worker_commands_notify();
