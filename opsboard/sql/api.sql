-- name: api_idempotency_get
-- The stored answer to an earlier request with this tenant's Idempotency-Key.
SELECT request_hash, status, response FROM api_idempotency WHERE tenant_id = %(tenant_id)s AND key = %(key)s;

-- name: api_idempotency_claim
-- Claim an Idempotency-Key inside the request's transaction; a concurrent claim
-- of the same key waits here until the first commits (then conflicts) or rolls back.
INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response)
VALUES (%(tenant_id)s, %(key)s, %(request_hash)s, 0, '{}')
ON CONFLICT (tenant_id, key) DO NOTHING
RETURNING key;

-- name: api_idempotency_store
-- Remember the answer given to a claimed Idempotency-Key.
UPDATE api_idempotency SET status = %(status)s, response = %(response)s
WHERE tenant_id = %(tenant_id)s AND key = %(key)s;

-- name: api_idempotency_prune
-- Forget up to %(limit)s Idempotency-Keys older than the retention, oldest first
-- (api_idempotency_created_idx): the outbox pruner calls it batch after batch in
-- paced slices, so that the keys of a day without a leader at a high API rate go
-- in many short statements, never in one long one.  One row per key forgotten.
WITH old AS (
    SELECT tenant_id, key FROM api_idempotency
    WHERE created_at < coalesce(%(now)s::timestamptz, now()) - %(keep)s::interval
    ORDER BY created_at
    LIMIT %(limit)s
)
DELETE FROM api_idempotency a USING old WHERE a.tenant_id = old.tenant_id AND a.key = old.key
RETURNING 1;
