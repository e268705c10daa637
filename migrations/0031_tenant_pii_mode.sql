-- What the HTTP API does with personal data found in a tenant's event or job payload
-- (opsboard.personal_data): 'refuse' answers 422 personal_data naming the field;
-- 'redact' replaces the offending string values by the mask before storing and
-- names the redacted fields in the answer.  Read with the API key (api_key_authenticate),
-- so a change applies within apikeys.CACHE_SECONDS.
ALTER TABLE tenants
    ADD COLUMN pii_mode text NOT NULL DEFAULT 'refuse' CHECK (pii_mode IN ('refuse', 'redact'));
