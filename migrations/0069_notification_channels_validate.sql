-- The rows written before 0068 are checked against notification_channels.  A separate file, so a
-- separate transaction: VALIDATE takes SHARE UPDATE EXCLUSIVE on deliveries (writes go on while it
-- scans), whereas in 0068's transaction the ADD's stronger lock would have been held throughout.
-- Every existing value is one of 0068's seeded built-ins (the CHECK lists allowed nothing else).
ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_channel_fkey;
ALTER TABLE notification_preferences VALIDATE CONSTRAINT notification_preferences_channel_fkey;
ALTER TABLE notification_templates VALIDATE CONSTRAINT notification_templates_channel_fkey;
