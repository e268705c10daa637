-- The demo application's own tables (opsboard.tools.demo_domain): what `opsboard demo`
-- and the tests publish events about.  Not part of the product schema (migration 0026
-- drops the copies 0006 created): `opsboard demo` applies this file after migrating,
-- and the test suite applies it to its template database.  Idempotent: every
-- statement may run again on a database that has the tables.
--
-- Personal data lives here, in the domain rows; events carry ids only.
CREATE TABLE IF NOT EXISTS demo_users (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    email      text NOT NULL,
    plan       text NOT NULL DEFAULT 'free',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS demo_users_tenant_idx ON demo_users (tenant_id, created_at);

CREATE TABLE IF NOT EXISTS demo_orders (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    user_id      uuid REFERENCES demo_users (id),
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    paid_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS demo_orders_tenant_idx ON demo_orders (tenant_id, paid_at);

-- The demo's sign-in codes, kept in clear so that its notification policy can put
-- the code in the SMS it renders.  The product's OTPs (opsboard.otp, table
-- otp_requests) store a hash only.
CREATE TABLE IF NOT EXISTS demo_otp_requests (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    phone      text NOT NULL,
    code       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- What the demo application's own consumers did: one row per (subscriber, event),
-- whatever the number of attempts.
CREATE TABLE IF NOT EXISTS demo_effects (
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

-- Row-level security on the demo's tenant tables, as on the product's (migration 0085).
DO $demo_rls$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['demo_users', 'demo_orders', 'demo_otp_requests', 'demo_effects'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = t::regclass) THEN
            PERFORM opsboard_enable_tenant_rls(t::regclass);
        END IF;
    END LOOP;
END
$demo_rls$;
