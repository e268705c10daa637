-- Notifications: the in-app inbox (source of truth), one delivery row per
-- recipient x event x channel, preferences with tenant defaults, quiet hours,
-- versioned templates (a published version is immutable), user bearer tokens
-- for the end-user inbox API, and end users (role 'member').

-- End users: a membership with no dashboard permission, only their inbox.
-- (Added, not used, in this transaction: PostgreSQL allows that.)
ALTER TYPE user_role ADD VALUE IF NOT EXISTS 'member';

-- Per-user notification settings: preferred locale, phone for SMS, time zone.
CREATE TABLE notification_profiles (
    user_id    uuid PRIMARY KEY REFERENCES users (id),
    locale     text CHECK (locale ~ '^[a-z]{2}$'),
    phone      text CHECK (phone ~ '^\+[1-9][0-9]{6,14}$'),
    time_zone  text NOT NULL DEFAULT 'Asia/Tehran',
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_profiles_phone_idx ON notification_profiles (phone) WHERE phone IS NOT NULL;

-- The tenant's default locale (second link of the chain user -> tenant -> fa).
CREATE TABLE notification_tenant_settings (
    tenant_id      uuid PRIMARY KEY REFERENCES tenants (id),
    default_locale text NOT NULL DEFAULT 'fa' CHECK (default_locale ~ '^[a-z]{2}$')
);

-- The inbox.  seq is the cursor (SSE event id, list/sync cursor): inserts take
-- a transaction-level advisory lock first (opsboard.notifications.fanout), so
-- seq order is commit order and a `since` reader never skips a late commit.
CREATE TABLE notifications (
    id               uuid PRIMARY KEY,                         -- UUIDv7
    seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id        uuid NOT NULL REFERENCES tenants (id),
    recipient_id     uuid NOT NULL REFERENCES users (id),
    event_id         uuid NOT NULL,
    event_type       text NOT NULL,
    category         text NOT NULL,
    template_key     text NOT NULL,
    template_version integer,                                  -- NULL: the built-in fallback text
    locale           text NOT NULL,
    title            text NOT NULL,
    body             text NOT NULL,
    data             jsonb NOT NULL DEFAULT '{}',              -- a reference (aggregate), not content
    created_at       timestamptz NOT NULL DEFAULT now(),
    seen_at          timestamptz,
    read_at          timestamptz,
    archived_at      timestamptz,
    UNIQUE (recipient_id, event_id)
);
CREATE INDEX notifications_recipient_seq_idx ON notifications (recipient_id, seq DESC);
CREATE INDEX notifications_unread_idx ON notifications (recipient_id) WHERE read_at IS NULL AND archived_at IS NULL;
CREATE INDEX notifications_event_idx ON notifications (event_id);

-- One row per recipient x event x channel, whatever happens to it.
-- queued: written by the fan-out with its notifications.deliver job (deferred_until
--   set when quiet hours pushed it to the window's end); -> sent when the provider
--   job is enqueued/the push left; -> delivered when the provider confirms
--   (inbox rows are delivered at once); -> failed on a permanent error.
-- suppressed: a policy rule refused it; suppression_reason says which, final.
CREATE TABLE deliveries (
    id                 uuid PRIMARY KEY,                       -- UUIDv7
    tenant_id          uuid NOT NULL REFERENCES tenants (id),
    recipient_id       uuid NOT NULL REFERENCES users (id),
    event_id           uuid NOT NULL,
    event_type         text NOT NULL,
    notification_id    uuid REFERENCES notifications (id),
    channel            text NOT NULL CHECK (channel IN ('inbox', 'push', 'sms', 'email')),
    status             text NOT NULL CHECK (status IN ('queued', 'sent', 'delivered', 'failed', 'suppressed')),
    suppression_reason text,
    deferred_until     timestamptz,
    generic            boolean NOT NULL DEFAULT false,         -- sensitive: generic push text
    template_key       text,
    template_version   integer,
    locale             text,
    job_id             uuid,                                   -- = id when a job was queued
    provider_ref       text,
    error_code         text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (recipient_id, event_id, channel),
    CHECK ((status = 'suppressed') = (suppression_reason IS NOT NULL))
);
CREATE INDEX deliveries_event_idx ON deliveries (event_id);
CREATE INDEX deliveries_template_idx ON deliveries (template_key, template_version);

-- user x category x channel; user_id NULL is the tenant's default.
CREATE TABLE notification_preferences (
    tenant_id  uuid NOT NULL REFERENCES tenants (id),
    user_id    uuid REFERENCES users (id),
    category   text NOT NULL,
    channel    text NOT NULL CHECK (channel IN ('inbox', 'push', 'sms', 'email')),
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (tenant_id, user_id, category, channel)
);

-- Quiet hours of a user, in their time zone: [start, end) on the listed ISO
-- days (1 = Monday); a window with end <= start runs over midnight and belongs
-- to the day it starts on.
CREATE TABLE quiet_hours (
    user_id    uuid PRIMARY KEY REFERENCES users (id),
    time_zone  text NOT NULL,
    start_time time NOT NULL,
    end_time   time NOT NULL,
    days       smallint[] NOT NULL DEFAULT '{1,2,3,4,5,6,7}',
    enabled    boolean NOT NULL DEFAULT true,
    CHECK (start_time <> end_time),
    CHECK (days <@ '{1,2,3,4,5,6,7}'::smallint[])
);

-- Versioned templates: key x channel x locale x version.  A draft is edited in
-- place; publishing freezes it (trigger below); rolling back publishes a copy of
-- an earlier version as a new one.  The live version is the highest published.
CREATE TABLE notification_templates (
    id           uuid PRIMARY KEY,
    key          text NOT NULL CHECK (key ~ '^[a-z][a-z0-9_.]{0,99}$'),
    channel      text NOT NULL CHECK (channel IN ('inbox', 'push', 'sms', 'email')),
    locale       text NOT NULL CHECK (locale ~ '^[a-z]{2}$'),
    version      integer NOT NULL CHECK (version >= 1),
    subject      text NOT NULL DEFAULT '',
    body         text NOT NULL,
    variables    text[] NOT NULL DEFAULT '{}',
    sample       jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'published')),
    author_label text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    rolled_back_from integer,
    UNIQUE (key, channel, locale, version),
    CHECK ((status = 'published') = (published_at IS NOT NULL))
);
-- At most one draft per key x channel x locale.
CREATE UNIQUE INDEX notification_templates_draft_idx ON notification_templates (key, channel, locale)
    WHERE status = 'draft';

CREATE FUNCTION notification_templates_freeze() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'published' THEN
        RAISE EXCEPTION 'notification template % v% is published and immutable', OLD.key, OLD.version
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END;
$$;
CREATE TRIGGER notification_templates_immutable
    BEFORE UPDATE OR DELETE ON notification_templates
    FOR EACH ROW EXECUTE FUNCTION notification_templates_freeze();

-- Bearer tokens of end users for /api/v1/inbox (SHA-256 of a long random secret).
CREATE TABLE user_tokens (
    id           uuid PRIMARY KEY,
    user_id      uuid NOT NULL REFERENCES users (id),
    name         text NOT NULL,
    prefix       text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX user_tokens_user_idx ON user_tokens (user_id);
