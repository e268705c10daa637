-- name: api_key_authenticate
-- The live key with this hash and its tenant (with the tenant's pii_mode: the API
-- applies it without another round trip).  Its last use is written at most
-- every 10 seconds, so that a busy client does not turn every request into a
-- write on one row.
WITH k AS (
    SELECT a.id, a.tenant_id, a.name, a.scopes, a.last_used_at, t.slug AS tenant_slug, t.pii_mode
    FROM api_keys a JOIN tenants t ON t.id = a.tenant_id
    WHERE a.key_hash = %(key_hash)s AND a.revoked_at IS NULL
), touched AS (
    UPDATE api_keys a SET last_used_at = coalesce(%(now)s::timestamptz, now())
    FROM k WHERE a.id = k.id
      AND (k.last_used_at IS NULL OR k.last_used_at < coalesce(%(now)s::timestamptz, now()) - interval '10 seconds')
    RETURNING a.id
)
SELECT id, tenant_id, name, scopes, tenant_slug, pii_mode FROM k;

-- name: api_key_list
-- The API keys of the tenants in a scope (never the hash), newest first.
SELECT a.id, a.tenant_id, t.slug AS tenant_slug, a.name, a.prefix, a.created_at, a.last_used_at, a.revoked_at
FROM api_keys a JOIN tenants t ON t.id = a.tenant_id
WHERE (%(scope_all)s OR a.tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY a.revoked_at IS NOT NULL, a.created_at DESC
LIMIT 500;

-- name: api_key_revoke
-- Revoke a live key inside a scope; nothing when already revoked or outside it.
UPDATE api_keys SET revoked_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND revoked_at IS NULL AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
RETURNING id, tenant_id, name, prefix, revoked_at;

-- name: api_key_get
-- One key inside a scope (never the hash).
SELECT id, tenant_id, name, prefix, created_at, last_used_at, revoked_at FROM api_keys
WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: api_key_insert
-- Store a new API key (hash only).
INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash, scopes, created_by)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(prefix)s, %(key_hash)s, %(scopes)s, %(created_by)s)
RETURNING id, tenant_id, name, prefix, scopes, created_at;
