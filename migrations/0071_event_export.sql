-- Events exported to NATS JetStream (issue 46; opsboard/outbox/export.py).
--
-- The export position is kept per event, like the relay's: exported_at is set
-- once, after JetStream acknowledged the event, by the one exporter (on the
-- leader).  A per-event mark rather than a single cursor because event ids are
-- made in Python before their transaction commits: a cursor "id > last" would
-- skip an event whose transaction committed after a later id was exported.  The
-- work list is a partial index, so it stays as small as the backlog.  (On a
-- large outbox, build the index first with CREATE INDEX CONCURRENTLY IF NOT
-- EXISTS ...; this file then passes over it.)
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS exported_at timestamptz;
CREATE INDEX IF NOT EXISTS outbox_events_unexported_idx ON outbox_events (id) WHERE exported_at IS NULL;

-- Still immutable: relayed_at and exported_at may each change once, from NULL
-- to a time, and nothing else ever changes.  A relayed event may be deleted
-- (the pruner's retention; the pruner keeps unexported events while an export
-- runs, see outbox.sql outbox_prune_relayed); an unrelayed one never.
CREATE OR REPLACE FUNCTION outbox_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.relayed_at IS NOT NULL THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'outbox event % is immutable', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Allowed: the relay's mark (relayed_at, while unrelayed) or the exporter's (exported_at, once,
    -- while unexported), one at a time, nothing else; after both, no update at all.
    IF (NEW.id, NEW.type, NEW.version, NEW.aggregate_type, NEW.aggregate_id, NEW.tenant_id, NEW.occurred_at,
        NEW.correlation_id, NEW.payload)
       IS DISTINCT FROM
       (OLD.id, OLD.type, OLD.version, OLD.aggregate_type, OLD.aggregate_id, OLD.tenant_id, OLD.occurred_at,
        OLD.correlation_id, OLD.payload)
       OR NOT ((OLD.relayed_at IS NULL AND NEW.exported_at IS NOT DISTINCT FROM OLD.exported_at)
               OR (OLD.exported_at IS NULL AND NEW.exported_at IS NOT NULL
                   AND NEW.relayed_at IS NOT DISTINCT FROM OLD.relayed_at)) THEN
        RAISE EXCEPTION 'outbox event % is immutable', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$;

-- One row per stream an exporter has written to: what it exported, when it last
-- ran, and its last trouble.  Its presence is what turns on the export lag in
-- /metrics, on Queue health and in the alert rule (an outbox that was never
-- exported is not "behind").  Platform-wide: no tenant_id.
CREATE TABLE IF NOT EXISTS event_export_state (
    stream           text PRIMARY KEY CHECK (stream ~ '^[A-Za-z0-9_-]{1,100}$'),
    subject_prefix   text NOT NULL,
    server           text NOT NULL,                -- host:port only, never credentials
    exported         bigint NOT NULL DEFAULT 0,    -- events acknowledged by JetStream, ever
    duplicates       bigint NOT NULL DEFAULT 0,    -- of which JetStream's window dropped as re-sends
    last_event_id    uuid,
    last_exported_at timestamptz,
    connected        boolean NOT NULL DEFAULT false,
    last_error       text CHECK (length(last_error) <= 500),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz NOT NULL DEFAULT now()
);
