-- Deliveries to real providers: webhook endpoints per tenant, circuit breakers
-- shared by every worker, outbound email/SMS messages and Web Push
-- subscriptions.  Job payloads carry only the ids of these rows.

-- A tenant's webhook endpoint.  secrets holds whsec_... secrets, newest first:
-- during a rotation every one of them signs each delivery.  event_types lists
-- the event types it receives ('*' receives all).  An endpoint that answered
-- 410, or kept failing for the long-failure window, is disabled with a reason.
CREATE TABLE webhook_endpoints (
    id              uuid PRIMARY KEY,                   -- UUIDv7
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    url             text NOT NULL CHECK (url ~ '^https?://'),
    secrets         text[] NOT NULL CHECK (cardinality(secrets) BETWEEN 1 AND 5),
    event_types     text[] NOT NULL DEFAULT '{*}',
    enabled         boolean NOT NULL DEFAULT true,
    disabled_reason text,
    disabled_at     timestamptz,
    description     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (enabled OR disabled_reason IS NOT NULL)
);
-- The fan-out reads a tenant's enabled endpoints for an event type.
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant_id) WHERE enabled;

-- Circuit breakers, one per webhook endpoint ('endpoint:<id>') and per provider
-- ('provider:sms', ...).  closed -> open after consecutive failures or a
-- failure rate over a window; open -> half_open when open_until passes and one
-- worker takes the probe (probe_until is its lease); half_open -> closed on
-- the probe's success, -> open again (longer cool-down) on its failure.
-- failing_since marks the start of an unbroken run of failures: the long-failure
-- rule disables an endpoint when it is older than the window.
CREATE TABLE circuit_breakers (
    name                 text PRIMARY KEY,
    tenant_id            uuid REFERENCES tenants (id),
    state                text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half_open')),
    consecutive_failures integer NOT NULL DEFAULT 0,
    window_started_at    timestamptz NOT NULL DEFAULT now(),
    window_calls         integer NOT NULL DEFAULT 0,
    window_failures      integer NOT NULL DEFAULT 0,
    opens                integer NOT NULL DEFAULT 0,   -- times opened in the current failure run
    opened_at            timestamptz,
    open_until           timestamptz,
    probe_until          timestamptz,
    failing_since        timestamptz,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    last_error_code      text,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- An email or SMS to send: the recipient, the template (name and version) and
-- its parameters live here, never in the job's payload.  provider_ref is the
-- provider's id (SMTP queue id, SMS gateway message id).
CREATE TABLE outbound_messages (
    id               uuid PRIMARY KEY,                  -- UUIDv7; also the SMS client id
    tenant_id        uuid NOT NULL REFERENCES tenants (id),
    channel          text NOT NULL CHECK (channel IN ('email', 'sms')),
    recipient        text NOT NULL,
    template         text NOT NULL,
    template_version integer NOT NULL,
    params           jsonb NOT NULL DEFAULT '{}',
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'sent', 'failed')),
    provider_ref     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz
);

-- A Web Push subscription: active until the push service says it is gone
-- (404/410: invalid) or its owner revokes it.  Never used again once inactive.
CREATE TABLE push_subscriptions (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id),
    user_ref        text,
    endpoint        text NOT NULL CHECK (endpoint ~ '^https?://'),
    p256dh          text NOT NULL,
    auth            text NOT NULL,
    state           text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'invalid', 'revoked')),
    invalid_reason  text,
    last_success_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, endpoint)
);
