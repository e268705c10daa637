-- Support tickets: a workflow with SLA, assignment, internal notes, attachments and decisions.
-- The state machine lives in opsboard/tickets/workflow.py; the database keeps the statuses,
-- one number per tenant, and who may read an internal note (enforced in opsboard/sql/tickets.sql).

-- new -> triaged -> in_progress <-> waiting_on_customer -> resolved -> closed; reopen; cancelled.
CREATE TYPE ticket_status AS ENUM ('new', 'triaged', 'in_progress', 'waiting_on_customer', 'resolved',
                                   'closed', 'cancelled');
CREATE TYPE ticket_priority AS ENUM ('low', 'normal', 'high', 'urgent');
CREATE TYPE ticket_message_kind AS ENUM ('reply', 'internal_note', 'system');

CREATE TABLE ticket_categories (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    slug        text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name        text NOT NULL,
    -- A request (access, refund...) needs a decision (approved/rejected + reason) before it is resolved.
    is_request  boolean NOT NULL DEFAULT false,
    -- Team that new tickets of this category go to (round-robin among its agents).
    team        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, slug)
);

-- First-response and resolution targets per tenant and priority.  business_hours, when set,
-- is {"days": [0..6 (Monday=0)], "start": "HH:MM", "end": "HH:MM"} in time_zone: the SLA
-- clock then only runs inside those hours (opsboard/tickets/sla.py).
CREATE TABLE sla_policies (
    id                     uuid PRIMARY KEY,
    tenant_id              uuid NOT NULL REFERENCES tenants (id),
    priority               ticket_priority NOT NULL,
    first_response_minutes integer NOT NULL CHECK (first_response_minutes > 0),
    resolution_minutes     integer NOT NULL CHECK (resolution_minutes > 0),
    time_zone              text NOT NULL DEFAULT 'UTC',
    business_hours         jsonb,
    created_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, priority)
);

-- Per-tenant ticket numbers (#1, #2...) and the round-robin pointer.
CREATE TABLE ticket_counters (
    tenant_id        uuid PRIMARY KEY REFERENCES tenants (id),
    last_number      bigint NOT NULL DEFAULT 0,
    last_assignee_id uuid
);

CREATE TABLE tickets (
    id                         uuid PRIMARY KEY,          -- UUIDv7: time-ordered, the queue's keyset
    tenant_id                  uuid NOT NULL REFERENCES tenants (id),
    number                     bigint NOT NULL,
    subject                    text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    category_id                uuid REFERENCES ticket_categories (id),
    priority                   ticket_priority NOT NULL DEFAULT 'normal',
    status                     ticket_status NOT NULL DEFAULT 'new',
    requester_id               uuid NOT NULL REFERENCES users (id),
    assignee_id                uuid REFERENCES users (id),
    team                       text,
    sla_policy_id              uuid REFERENCES sla_policies (id),
    first_response_due_at      timestamptz,
    resolution_due_at          timestamptz,
    first_responded_at         timestamptz,
    -- Paused-time accounting: the clock stops while waiting_on_customer.
    paused_at                  timestamptz,
    paused_seconds             bigint NOT NULL DEFAULT 0 CHECK (paused_seconds >= 0),
    first_response_breached_at timestamptz,
    resolution_breached_at     timestamptz,
    decision                   text CHECK (decision IN ('approved', 'rejected')),
    decision_reason            text,
    resolution_code            text,
    resolution_summary         text,
    resolved_at                timestamptz,
    closed_at                  timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, number),
    CHECK (status <> 'resolved' OR (resolution_code IS NOT NULL AND resolution_summary IS NOT NULL)),
    CHECK ((decision IS NULL) = (decision_reason IS NULL))
);
-- The queue: newest first per tenant, per status, per assignee (keyset on id).
CREATE INDEX tickets_tenant_id_idx ON tickets (tenant_id, id DESC);
CREATE INDEX tickets_status_id_idx ON tickets (status, id DESC);
CREATE INDEX tickets_assignee_id_idx ON tickets (assignee_id, id DESC) WHERE assignee_id IS NOT NULL;
CREATE INDEX tickets_requester_id_idx ON tickets (requester_id, id DESC);

CREATE TABLE ticket_messages (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    ticket_id    uuid NOT NULL REFERENCES tickets (id),
    kind         ticket_message_kind NOT NULL,
    author_id    uuid REFERENCES users (id),
    author_label text NOT NULL,
    body         text NOT NULL CHECK (length(body) BETWEEN 1 AND 20000),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ticket_messages_ticket_idx ON ticket_messages (ticket_id, id);

CREATE TABLE ticket_attachments (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id),
    ticket_id    uuid NOT NULL REFERENCES tickets (id),
    message_id   uuid NOT NULL REFERENCES ticket_messages (id),
    filename     text NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
    -- Sniffed from the bytes, never the uploader's claim.
    content_type text NOT NULL,
    size_bytes   bigint NOT NULL CHECK (size_bytes >= 0),
    sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    storage_key  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ticket_attachments_message_idx ON ticket_attachments (message_id);
CREATE INDEX ticket_attachments_ticket_idx ON ticket_attachments (ticket_id);

-- Minimal user bearer tokens for the customer ticket API (/api/v1/tickets): the sha256 of
-- the secret, bound to one user and one tenant.
CREATE TABLE ticket_user_tokens (
    id          uuid PRIMARY KEY,
    token_hash  bytea NOT NULL UNIQUE,
    user_id     uuid NOT NULL REFERENCES users (id),
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- The SLA badge, one definition for lists, filters and the detail page: breached (marked by the
-- breach job, or past the due time that still matters), met (closed out), paused (waiting on the
-- customer), at_risk (the last quarter of the target), else on_track.
CREATE FUNCTION ticket_sla_state(status ticket_status, first_response_due_at timestamptz,
                                 resolution_due_at timestamptz, first_responded_at timestamptz,
                                 paused_at timestamptz, first_response_breached_at timestamptz,
                                 resolution_breached_at timestamptz, first_response_minutes integer,
                                 resolution_minutes integer, at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN first_response_breached_at IS NOT NULL OR resolution_breached_at IS NOT NULL THEN 'breached'
        WHEN status IN ('resolved', 'closed', 'cancelled') THEN 'met'
        WHEN paused_at IS NOT NULL THEN 'paused'
        WHEN (CASE WHEN first_responded_at IS NULL THEN first_response_due_at ELSE resolution_due_at END) IS NULL
            THEN 'on_track'
        WHEN at >= (CASE WHEN first_responded_at IS NULL THEN first_response_due_at ELSE resolution_due_at END)
            THEN 'breached'
        WHEN (CASE WHEN first_responded_at IS NULL THEN first_response_due_at ELSE resolution_due_at END) - at
             <= make_interval(secs => 15 * coalesce(CASE WHEN first_responded_at IS NULL THEN first_response_minutes
                                                        ELSE resolution_minutes END, 0))
            THEN 'at_risk'
        ELSE 'on_track'
    END
$$;
