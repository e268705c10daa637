-- 0056: an inbox row is the inbox channel's delivery (issue 27: the broadcast).
--
-- The fan-out wrote, for every recipient whose inbox channel passed, an inbox row and a deliveries
-- row (channel 'inbox', status 'delivered' at once, never moved again): a heap row and 3 index
-- entries (deliveries_pkey, deliveries_event_recipient_channel_key, deliveries_template_idx) that
-- said nothing the inbox row does not say (who, which event, which template version and locale,
-- when).  It writes the inbox row only now; a suppressed inbox channel is still a deliveries row
-- (status 'suppressed' and its reason), as are all other channels.
--
-- notification_deliveries is what every reader of delivery states reads: the deliveries rows and,
-- for each inbox row without an inbox-channel deliveries row, that row as the inbox channel's
-- delivery ('delivered', its id the inbox row's).  Rows written before this migration (and by the
-- previous release's workers during a rolling upgrade) have their own 'inbox' deliveries row: the
-- probe of deliveries_event_recipient_channel_key shows each inbox delivery once.
--
-- notifications_template_idx answers the template page's reads of the inbox channel (its usage
-- per version and its latest deliveries), which deliveries_template_idx answered: one entry per
-- inbox row in place of the deliveries row's three.
CREATE VIEW notification_deliveries AS
SELECT d.id, d.tenant_id, d.recipient_id, d.event_id, d.event_type, d.notification_id, d.channel, d.status,
       d.suppression_reason, d.deferred_until, d.generic, d.template_key, d.template_version, d.locale,
       d.job_id, d.provider_ref, d.error_code, d.created_at, d.updated_at
FROM deliveries d
UNION ALL
SELECT n.id, n.tenant_id, n.recipient_id, n.event_id, n.event_type, n.id, 'inbox', 'delivered',
       NULL, NULL, false, n.template_key, n.template_version, n.locale,
       NULL::uuid, NULL, NULL, n.created_at, n.created_at
FROM notifications n
WHERE NOT EXISTS (SELECT 1 FROM deliveries o
                  WHERE o.event_id = n.event_id AND o.recipient_id = n.recipient_id AND o.channel = 'inbox');

CREATE INDEX notifications_template_idx ON notifications (template_key, created_at);
