-- Notification channels are catalogue entries (opsboard.channels): the built-ins (inbox, push, sms,
-- email) and any an extension module registers.  The database checks a channel value against this
-- table instead of a CHECK list that only a migration could extend: every web and worker start
-- upserts the active catalogue's channels here (notification_channel_upsert), so an extension's
-- channel is a row before any of its deliveries, preferences or templates is written.
--
-- A row is never deleted by the product: a channel an extension no longer registers keeps its row,
-- so the history of its deliveries stays valid.
CREATE TABLE notification_channels (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,31}$'),
    -- The English label (the message id of its translation); pages show the translated one.
    label       text NOT NULL DEFAULT '',
    -- The delivery states a delivery of this channel can reach (documentation and a check in
    -- opsboard.channels.record_outcome, not a constraint on deliveries).
    states      text[] NOT NULL DEFAULT '{}',
    -- The module that registered it ("deliveries", "notifications" or an extension's name).
    registered_by text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO notification_channels (name, label, states, registered_by) VALUES
    ('inbox', 'Inbox', '{delivered,suppressed}', 'notifications'),
    ('push', 'Push', '{queued,sent,failed,expired,suppressed}', 'deliveries'),
    ('sms', 'SMS', '{queued,sent,delivered,failed,bounced,expired,suppressed}', 'deliveries'),
    ('email', 'Email', '{queued,sent,delivered,failed,bounced,expired,suppressed}', 'deliveries');

ALTER TABLE deliveries DROP CONSTRAINT deliveries_channel_check;
ALTER TABLE notification_preferences DROP CONSTRAINT notification_preferences_channel_check;
ALTER TABLE notification_templates DROP CONSTRAINT notification_templates_channel_check;

-- NOT VALID: adding the keys takes a moment, whatever the size of deliveries (tens of millions of
-- rows after a few broadcasts); new and changed rows are checked from now on.  The existing rows
-- are checked by 0069 in its own transaction, under a lock that lets writes go on.
ALTER TABLE deliveries ADD CONSTRAINT deliveries_channel_fkey
    FOREIGN KEY (channel) REFERENCES notification_channels (name) NOT VALID;
ALTER TABLE notification_preferences ADD CONSTRAINT notification_preferences_channel_fkey
    FOREIGN KEY (channel) REFERENCES notification_channels (name) NOT VALID;
ALTER TABLE notification_templates ADD CONSTRAINT notification_templates_channel_fkey
    FOREIGN KEY (channel) REFERENCES notification_channels (name) NOT VALID;
