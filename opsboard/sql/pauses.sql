-- name: pause_get_for_update
-- One pause, locked (a pause or resume of the same thing waits for this one).
SELECT kind, target, reason, paused_by, paused_at, resume_at, tenant_id
FROM pauses WHERE kind = %(kind)s AND target = %(target)s
FOR UPDATE;

-- name: pause_upsert
-- Hold a thing, or change the reason and resume time of a hold already there.
-- The pauses_notify triggers (migration 0067: only when a row changed) wake every worker.
INSERT INTO pauses (kind, target, reason, paused_by, paused_at, resume_at, tenant_id)
VALUES (%(kind)s, %(target)s, %(reason)s, %(paused_by)s, coalesce(%(now)s::timestamptz, now()),
        %(resume_at)s, %(tenant_id)s)
ON CONFLICT (kind, target) DO UPDATE
SET reason = EXCLUDED.reason, paused_by = EXCLUDED.paused_by, paused_at = EXCLUDED.paused_at,
    resume_at = EXCLUDED.resume_at, tenant_id = EXCLUDED.tenant_id
RETURNING kind, target, reason, paused_by, paused_at, resume_at, tenant_id;

-- name: pause_delete
-- Release a hold; no row when it was not held.
DELETE FROM pauses WHERE kind = %(kind)s AND target = %(target)s
RETURNING kind, target, reason, paused_by, paused_at, resume_at, tenant_id;

-- name: pause_delete_expired
-- Release every hold whose resume_at has passed (they count as resumed already:
-- the claim ignores them); SKIP LOCKED so that two readers never wait on each other.
DELETE FROM pauses p
WHERE (p.kind, p.target) IN (
    SELECT kind, target FROM pauses
    WHERE resume_at <= coalesce(%(now)s::timestamptz, now())
    FOR UPDATE SKIP LOCKED)
RETURNING kind, target, reason, paused_by, paused_at, resume_at, tenant_id;

-- name: pause_list
-- The holds in force, by kind then target.
SELECT kind, target, reason, paused_by, paused_at, resume_at, tenant_id
FROM pauses
WHERE resume_at IS NULL OR resume_at > coalesce(%(now)s::timestamptz, now())
ORDER BY kind, target;

-- name: pause_limit_list
-- Live concurrency limits an operator set (limit_overrides), by kind then target.
SELECT kind, target, value, changed_by, changed_at FROM limit_overrides ORDER BY kind, target;

-- name: pause_limit_get_for_update
SELECT kind, target, value, changed_by, changed_at FROM limit_overrides
WHERE kind = %(kind)s AND target = %(target)s
FOR UPDATE;

-- name: pause_limit_upsert
INSERT INTO limit_overrides (kind, target, value, changed_by)
VALUES (%(kind)s, %(target)s, %(value)s, %(changed_by)s)
ON CONFLICT (kind, target) DO UPDATE
SET value = EXCLUDED.value, changed_by = EXCLUDED.changed_by, changed_at = now()
RETURNING kind, target, value, changed_by, changed_at;

-- name: pause_limit_delete
DELETE FROM limit_overrides WHERE kind = %(kind)s AND target = %(target)s
RETURNING kind, target, value, changed_by, changed_at;
