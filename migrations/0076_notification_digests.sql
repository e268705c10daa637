-- 0076: digests (issue 43).  A policy may collect a category per recipient (and optionally per
-- one payload field) into one send per window: a fixed window from the first item, or a schedule
-- in the recipient's time zone; what arrives in quiet hours is collected the same way until the
-- window's end.  Critical categories never wait in one.  The inbox keeps every item: a digest is
-- a delivery of a channel, not a replacement of the inbox rows.
--
-- A digest is one row per (tenant, recipient, channel, category, key) window.  Its id is the id of
-- its first item's delivery (the "head"): that delivery is queued with a deliver job at flush_at,
-- and that job is the flush -- it closes the digest and sends the digest text instead of the item
-- (opsboard.notifications.digest).  Every later item of the window is written as a delivery in
-- status 'digested' naming the digest (deliveries.digest_id) and gets no job.
--
-- Exactly one digest per window: at most one open digest per key (the partial unique index below;
-- the fan-out's upsert arbitrates on it), and one job per digest (the job's id is the head
-- delivery's, jobs_pkey), whose send is guarded like every delivery's (effect records of the
-- provider job), so a worker killed mid-flush sends it once.
--   open    written by the fan-out with the first item; items join it (item_count, last_*);
--   closed  the flush (the head's deliver job) closed it, in the transaction that hands the digest
--           to its provider job; an item arriving afterwards opens the next window.  Final.
CREATE TABLE notification_digests (
    id                    uuid PRIMARY KEY,                -- = the head delivery's id
    tenant_id             uuid NOT NULL REFERENCES tenants (id),
    recipient_id          uuid NOT NULL REFERENCES users (id),
    channel               text NOT NULL,                   -- its head delivery's (checked there)
    category              text NOT NULL,
    digest_key            text NOT NULL DEFAULT '',        -- the payload field's value ('' when none)
    kind                  text NOT NULL CHECK (kind IN ('window', 'schedule', 'quiet')),
    status                text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    opened_at             timestamptz NOT NULL,
    flush_at              timestamptz NOT NULL,
    closed_at             timestamptz,
    item_count            integer NOT NULL DEFAULT 1 CHECK (item_count >= 1),
    first_event_id        uuid NOT NULL,
    last_event_id         uuid NOT NULL,
    -- The items' inbox rows (their titles are the digest's first and last lines); NULL when the
    -- item's inbox channel was suppressed.
    first_notification_id uuid,
    last_notification_id  uuid,
    last_at               timestamptz NOT NULL,
    CHECK ((status = 'closed') = (closed_at IS NOT NULL))
);
-- The one open window per key: the fan-out's ON CONFLICT arbiter.
CREATE UNIQUE INDEX notification_digests_open_key
    ON notification_digests (tenant_id, recipient_id, channel, category, digest_key) WHERE status = 'open';
-- The dashboard's pending digests of a tenant, soonest first.
CREATE INDEX notification_digests_pending_idx ON notification_digests (tenant_id, flush_at) WHERE status = 'open';

-- An item's delivery names its digest (the head names its own).  No foreign key: the head's row
-- and the digest are written by one statement, and deliveries is the broadcast's hot table.
ALTER TABLE deliveries ADD COLUMN digest_id uuid;
CREATE INDEX deliveries_digest_idx ON deliveries (digest_id) WHERE digest_id IS NOT NULL;

-- digested: the item went out inside its digest (digest_id); final, never handed over itself.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_status_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_status_check
    CHECK (status IN ('queued', 'sent', 'delivered', 'failed', 'bounced', 'expired', 'suppressed', 'digested'));

-- When a digest opened at p_now is flushed: a window p_seconds from now, or the next p_at in the
-- recipient's zone (p_tz; unknown: UTC), and never before the end of a quiet window (p_quiet).
-- opsboard.notifications.digest.flush_at is the same rule in Python.
CREATE FUNCTION opsboard_digest_flush_at(p_now timestamptz, p_kind text, p_seconds integer, p_at time,
                                         p_tz text, p_quiet timestamptz)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
DECLARE
    tz text := coalesce(p_tz, 'UTC');
    local_now timestamp;
    due timestamptz;
BEGIN
    IF p_kind = 'window' THEN
        due := p_now + make_interval(secs => p_seconds);
    ELSIF p_kind = 'schedule' THEN
        BEGIN
            local_now := p_now AT TIME ZONE tz;
        EXCEPTION WHEN invalid_parameter_value THEN
            tz := 'UTC';
            local_now := p_now AT TIME ZONE tz;
        END;
        due := (local_now::date + p_at) AT TIME ZONE tz;
        IF due <= p_now THEN
            due := (local_now::date + 1 + p_at) AT TIME ZONE tz;
        END IF;
    ELSE
        due := p_quiet;
    END IF;
    RETURN greatest(due, p_quiet);
END;
$$;
