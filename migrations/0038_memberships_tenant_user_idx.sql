-- A tenant's active members in user-id order: the broadcast audience is read in pages by keyset
-- (opsboard.notifications.policy.tenant_members), one index range per page, whatever the tenant's size.
CREATE INDEX memberships_tenant_user_idx ON memberships (tenant_id, user_id) WHERE active;
