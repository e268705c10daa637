-- The transactional outbox: a domain change and its event are written in one
-- transaction; the relay (a worker service on every worker) turns committed
-- events into jobs and marks them relayed.  A stored event is never edited:
-- old versions are read through upcasters (opsboard/outbox.py).

CREATE TABLE outbox_events (
    id             uuid PRIMARY KEY,              -- UUIDv7, generated in Python
    type           text NOT NULL,                 -- e.g. 'order.paid'
    version        smallint NOT NULL CHECK (version > 0),
    aggregate_type text NOT NULL,                 -- e.g. 'order'
    aggregate_id   text NOT NULL,
    tenant_id      uuid NOT NULL REFERENCES tenants (id),
    occurred_at    timestamptz NOT NULL DEFAULT now(),
    correlation_id text,
    payload        jsonb NOT NULL,                -- minimal: ids and options, no PII unless declared
    relayed_at     timestamptz                    -- set once by the relay, in the transaction that made the jobs
);

-- The relay's work list: unrelayed events, oldest first.  Partial, so it stays
-- small however many events are kept.
CREATE INDEX outbox_events_unrelayed_idx ON outbox_events (id) WHERE relayed_at IS NULL;
CREATE INDEX outbox_events_aggregate_idx ON outbox_events (tenant_id, aggregate_type, aggregate_id, id);

-- Immutable: only relayed_at may change, once, from NULL to a time.  A relayed
-- event may be deleted (the pruner's retention); an unrelayed one never.
CREATE FUNCTION outbox_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.relayed_at IS NOT NULL THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'outbox event % is immutable', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.relayed_at IS NOT NULL
       OR (NEW.id, NEW.type, NEW.version, NEW.aggregate_type, NEW.aggregate_id, NEW.tenant_id, NEW.occurred_at,
           NEW.correlation_id, NEW.payload)
          IS DISTINCT FROM
          (OLD.id, OLD.type, OLD.version, OLD.aggregate_type, OLD.aggregate_id, OLD.tenant_id, OLD.occurred_at,
           OLD.correlation_id, OLD.payload) THEN
        RAISE EXCEPTION 'outbox event % is immutable', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER outbox_events_immutable
    BEFORE UPDATE OR DELETE ON outbox_events FOR EACH ROW EXECUTE FUNCTION outbox_events_immutable();

-- Wake relays: one notification per inserting statement.
CREATE FUNCTION outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opsboard_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();
