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
-- The relay's per-aggregate fence: "is an earlier event of this aggregate still
-- unrelayed?" must not walk the aggregate's relayed history.
CREATE INDEX outbox_events_aggregate_unrelayed_idx ON outbox_events (tenant_id, aggregate_type, aggregate_id, id)
    WHERE relayed_at IS NULL;

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

-- HTTP API idempotency: one row per (tenant, Idempotency-Key), written in the
-- transaction that does the work, so a repeat finds the first response (same
-- request) or answers 409 (another request).  A concurrent repeat waits on the
-- unique index until the first commits or rolls back.
CREATE TABLE api_idempotency (
    tenant_id     uuid NOT NULL REFERENCES tenants (id),
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    request_hash  bytea NOT NULL,            -- sha256 of method, path and body
    status        smallint NOT NULL,
    response      jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX api_idempotency_created_idx ON api_idempotency (created_at);

-- The demo domain (opsboard/demo_domain.py): what `opsboard demo` and the tests
-- publish events about.  Personal data lives here, in the domain rows; events
-- carry ids only.
CREATE TABLE demo_users (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    email      text NOT NULL,
    plan       text NOT NULL DEFAULT 'free',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX demo_users_tenant_idx ON demo_users (tenant_id, created_at);

CREATE TABLE demo_orders (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    user_id      uuid REFERENCES demo_users (id),
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    paid_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX demo_orders_tenant_idx ON demo_orders (tenant_id, paid_at);

CREATE TABLE demo_otp_requests (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    phone      text NOT NULL,
    code       text NOT NULL,               -- demo only: a real service stores a hash
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- What the demo subscribers did, until the provider handlers replace them:
-- one row per (subscriber, event), whatever the number of attempts.
CREATE TABLE demo_effects (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber   text NOT NULL,
    event_id     uuid NOT NULL,
    job_id       uuid NOT NULL,
    tenant_id    uuid NOT NULL,
    aggregate    text,
    detail       jsonb NOT NULL DEFAULT '{}',
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (subscriber, event_id)
);
