-- A rotated webhook secret's overlap window (issue 26): after a rotation the older
-- secrets keep signing beside the new one (secrets[1]) until previous_secrets_until;
-- from then on only secrets[1] signs, and the next rotation drops them.  NULL: one
-- secret, nothing to expire.  Endpoints rotated before this migration get the
-- default window (24 hours) from now, so their old secrets stop too.
ALTER TABLE webhook_endpoints ADD COLUMN previous_secrets_until timestamptz;
UPDATE webhook_endpoints SET previous_secrets_until = now() + interval '24 hours' WHERE cardinality(secrets) > 1;
