-- 0027: incident controls (issue 28): an operator holds a queue, a job type,
-- a tenant or a provider.
--
-- One row per held thing.  The claim (opsboard/sql/jobs.sql: job_claim_many)
-- filters held work in the claim statement; the worker passes the holds as
-- parameters, re-read on every NOTIFY below and at least every second (and
-- before its first claim).  A row whose resume_at has passed counts as resumed
-- already; the pauses service (leader) or the next read of the list deletes
-- it, audited as an automatic resume.
-- A provider pause holds every job type whose policy names that provider
-- (the catalogue, in Python, knows which: the claim receives that map).
CREATE TABLE pauses (
    kind text NOT NULL CHECK (kind IN ('queue', 'type', 'tenant', 'provider')),
    target text NOT NULL CHECK (length(target) BETWEEN 1 AND 200),
    reason text NOT NULL CHECK (length(reason) > 0),
    paused_by text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    resume_at timestamptz,
    -- The tenant a tenant pause holds (for the tenant's own ops role and the
    -- audit); NULL for the other kinds.
    tenant_id uuid,
    PRIMARY KEY (kind, target)
);

-- Workers are woken at once on every change: they re-read the holds before
-- their next claim, and a resume does not wait for the poll.
CREATE FUNCTION pauses_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opsboard_pauses', '*');
    RETURN NULL;
END $$;

CREATE TRIGGER pauses_notify AFTER INSERT OR UPDATE OR DELETE ON pauses
    FOR EACH STATEMENT EXECUTE FUNCTION pauses_notify();

-- Live concurrency (issue 28): an operator's limit for a job type or a
-- provider, fleet-wide, replacing the catalogue's until removed.  Workers
-- re-read it with the holds (the same NOTIFY, the same one-second fallback).
CREATE TABLE limit_overrides (
    kind text NOT NULL CHECK (kind IN ('type', 'provider')),
    target text NOT NULL CHECK (length(target) BETWEEN 1 AND 200),
    value integer NOT NULL CHECK (value BETWEEN 1 AND 100000),
    changed_by text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, target)
);

CREATE TRIGGER limit_overrides_notify AFTER INSERT OR UPDATE OR DELETE ON limit_overrides
    FOR EACH STATEMENT EXECUTE FUNCTION pauses_notify();
