-- 0090: reports run on workflows (issue 45).  A run's request job plans its slices and inserts one
-- workflow: a task per chunk (its slice's bounds in its payload, its part's key and row count in its
-- recorded result) and the assembly as the fan-in task that depends on every chunk.  The workflow
-- releases the assembly when the last chunk succeeds, exactly once, so the run keeps no bookkeeping
-- of its own: progress is read from the workflow's tasks (report_run_get, report_run_list).
--
-- Expand only (docs/operations.md, "Upgrading without stopping"): report_chunks, done_chunks and
-- assemble_enqueued_at stay while the previous release's workers may still read them; nothing of
-- this release writes or reads them, and a release after the next may drop them.  A run that the
-- previous release planned (no workflow_id) and that a worker of this release picks up fails with
-- report_replanned (opsboard.reports.handlers): request it again.

ALTER TABLE report_runs ADD COLUMN workflow_id uuid REFERENCES workflows (id);

-- A report job that goes dead, or is cancelled (its workflow cancelled), fails its run in the same
-- transaction, whoever moved it (the worker's outcome, the lease reaper, expiry, an operator).  A
-- chunk's own state is its workflow task's (the previous release's chunk rows are still marked).
CREATE OR REPLACE FUNCTION report_job_dead() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run uuid := (NEW.payload ->> 'run_id')::uuid;
BEGIN
    IF run IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.type = 'reports.chunk' AND NEW.status = 'dead' THEN
        UPDATE report_chunks SET status = 'failed', job_id = NEW.id
        WHERE run_id = run AND seq = (NEW.payload ->> 'seq')::int AND status <> 'done';
    END IF;
    UPDATE report_runs
    SET status = 'failed', failed_job_id = NEW.id,
        error_code = coalesce(NEW.last_error_code, NEW.status::text), finished_at = now()
    WHERE id = run AND status <> 'ready';
    RETURN NULL;
END;
$$;
DROP TRIGGER jobs_report_dead ON jobs;
CREATE TRIGGER jobs_report_dead
    AFTER UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('dead', 'cancelled') AND OLD.status NOT IN ('dead', 'cancelled')
          AND NEW.type IN ('reports.request', 'reports.chunk', 'reports.assemble'))
    EXECUTE FUNCTION report_job_dead();
