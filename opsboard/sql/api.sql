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
-- in many short statements, never in one long one.  By ctid (a TID scan), not a
-- join on the two-column key, which the planner hashed over a sequential scan of
-- the whole table for every batch (docs/performance.md, pruners); the age is
-- checked again on the row deleted.  One row per key forgotten.
DELETE FROM api_idempotency
WHERE ctid = ANY (ARRAY(SELECT ctid FROM api_idempotency
                        WHERE created_at < coalesce(%(now)s::timestamptz, now()) - %(keep)s::interval
                        ORDER BY created_at
                        LIMIT %(limit)s))
  AND created_at < coalesce(%(now)s::timestamptz, now()) - %(keep)s::interval
RETURNING 1;
