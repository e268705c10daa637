-- Foundation: tenants, users, memberships, API keys, the append-only audit log,
-- and the login throttle.

CREATE TABLE tenants (
    id          uuid PRIMARY KEY,
    slug        text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name        text NOT NULL,
    -- Members of an operator tenant see every tenant (the platform's own staff).
    is_operator boolean NOT NULL DEFAULT false,
    -- Relative share of worker slots in tenant-fair claims.
    weight      smallint NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 100),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    email         text NOT NULL CHECK (email = lower(email) AND position('@' in email) > 1),
    display_name  text NOT NULL DEFAULT '',
    password_hash text NOT NULL,
    is_active     boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_login_at timestamptz
);
CREATE UNIQUE INDEX users_email_key ON users (email);

CREATE TYPE user_role AS ENUM ('admin', 'ops', 'support_agent', 'template_author');

CREATE TABLE memberships (
    user_id    uuid NOT NULL REFERENCES users (id),
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    role       user_role NOT NULL,
    active     boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, tenant_id, role)
);
CREATE INDEX memberships_tenant_idx ON memberships (tenant_id) WHERE active;

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    name         text NOT NULL,
    -- The first characters of the key, shown to identify it; the key itself is
    -- stored only as a SHA-256 hash (keys are long random strings, so a slow
    -- hash buys nothing).
    prefix       text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    scopes       text[] NOT NULL DEFAULT '{}',
    created_by   uuid REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);

CREATE TABLE audit_log (
    id          uuid PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor_id    uuid REFERENCES users (id),
    -- Who acted, as shown: an email, 'system', 'worker:<id>', 'cli'.
    actor_label text NOT NULL,
    action      text NOT NULL,
    target_type text,
    target_id   text,
    tenant_id   uuid,
    reason      text,
    before      jsonb,
    after       jsonb,
    request_id  text,
    -- A client-chosen key that makes an action idempotent: the same
    -- (action, request_key) is recorded, and so carried out, once.
    request_key text
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_actor_idx ON audit_log (actor_label, at DESC);
CREATE INDEX audit_log_action_idx ON audit_log (action, at DESC);
CREATE INDEX audit_log_target_idx ON audit_log (target_type, target_id);
CREATE UNIQUE INDEX audit_log_request_key_idx ON audit_log (action, request_key) WHERE request_key IS NOT NULL;

CREATE FUNCTION audit_log_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_reject_change();
CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_reject_change();

-- Failed logins, for throttling per account and per address across all web
-- processes. Old rows are pruned by the maintenance services.
CREATE TABLE login_failures (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email   text NOT NULL,
    address text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_email_idx ON login_failures (email, at);
CREATE INDEX login_failures_address_idx ON login_failures (address, at);
