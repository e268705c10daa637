-- 0070: notification templates belong to a tenant or to the platform (issue 42).
--
-- tenant_id NULL is the platform's version, set by the operator tenant's authors (and the shipped
-- templates, seeded as platform version 1); a tenant's own version overrides it for that tenant's
-- recipients only.  Every row of today stays a platform version (the column is added NULL).
-- Versions are numbered per scope: the platform's (key, channel, locale) and each tenant's have
-- their own v1, v2...; one draft per scope.  Partial unique indexes instead of NULLS NOT DISTINCT,
-- so the platform's keys do not carry a NULL column.
ALTER TABLE notification_templates ADD COLUMN tenant_id uuid REFERENCES tenants (id);

ALTER TABLE notification_templates DROP CONSTRAINT notification_templates_key_channel_locale_version_key;
CREATE UNIQUE INDEX notification_templates_platform_version_idx
    ON notification_templates (key, channel, locale, version) WHERE tenant_id IS NULL;
CREATE UNIQUE INDEX notification_templates_tenant_version_idx
    ON notification_templates (tenant_id, key, channel, locale, version) WHERE tenant_id IS NOT NULL;

DROP INDEX notification_templates_draft_idx;
CREATE UNIQUE INDEX notification_templates_platform_draft_idx
    ON notification_templates (key, channel, locale) WHERE status = 'draft' AND tenant_id IS NULL;
CREATE UNIQUE INDEX notification_templates_tenant_draft_idx
    ON notification_templates (tenant_id, key, channel, locale) WHERE status = 'draft' AND tenant_id IS NOT NULL;

-- A version never moves between scopes: a draft's tenant is fixed when it is made.
CREATE FUNCTION notification_templates_keep_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenant_id IS DISTINCT FROM OLD.tenant_id THEN
        RAISE EXCEPTION 'notification template % v% cannot change its tenant', OLD.key, OLD.version
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER notification_templates_tenant_fixed
    BEFORE UPDATE ON notification_templates
    FOR EACH ROW EXECUTE FUNCTION notification_templates_keep_tenant();

-- Which scope's version a delivery used: true = the delivery's tenant's own version; NULL or false =
-- the platform's (or the shipped text).  Version numbers alone no longer say it (per-scope numbering),
-- and the template page counts a tenant's deliveries per version of each scope.  Nullable, no default:
-- adding it rewrites nothing, and rows written before are platform versions (the only kind there was).
ALTER TABLE deliveries ADD COLUMN template_own boolean;
ALTER TABLE notifications ADD COLUMN template_own boolean;

CREATE OR REPLACE VIEW notification_deliveries AS
SELECT d.id, d.tenant_id, d.recipient_id, d.event_id, d.event_type, d.notification_id, d.channel, d.status,
       d.suppression_reason, d.deferred_until, d.generic, d.template_key, d.template_version, d.locale,
       d.job_id, d.provider_ref, d.error_code, d.created_at, d.updated_at, d.template_own
FROM deliveries d
UNION ALL
SELECT n.id, n.tenant_id, n.recipient_id, n.event_id, n.event_type, n.id, 'inbox', 'delivered',
       NULL, NULL, false, n.template_key, n.template_version, n.locale,
       NULL::uuid, NULL, NULL, n.created_at, n.created_at, n.template_own
FROM notifications n
WHERE NOT EXISTS (SELECT 1 FROM deliveries o
                  WHERE o.event_id = n.event_id AND o.recipient_id = n.recipient_id AND o.channel = 'inbox');
