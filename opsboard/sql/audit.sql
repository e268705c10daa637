-- name: audit_insert
-- Append an audit record; with a request_key, a repeated (action, request_key) inserts nothing.
INSERT INTO audit_log (id, actor_id, actor_label, action, target_type, target_id, tenant_id,
                       reason, before, after, request_id, request_key, outcome)
VALUES (%(id)s, %(actor_id)s, %(actor_label)s, %(action)s, %(target_type)s, %(target_id)s, %(tenant_id)s,
        %(reason)s, %(before)s, %(after)s, %(request_id)s, %(request_key)s, %(outcome)s)
ON CONFLICT (action, request_key) WHERE request_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: audit_get_by_request_key
-- The record an earlier identical request wrote.
SELECT * FROM audit_log WHERE action = %(action)s AND request_key = %(request_key)s;

-- name: audit_list
-- Audit records inside a scope, newest first, filtered, keyset-paginated on (at, id).
-- The actor filter is a case-insensitive substring and the action filter an
-- exact name or a dotted prefix ("job" -> "job.replay"), both matched literally:
-- a typed % or _ is not a wildcard.
-- staff_role: the actor's role when they are operator staff (a member of an
-- operator tenant); a tenant-scoped viewer sees that role, not their address,
-- and cannot find staff by typing part of an address.
SELECT id, at, actor_id, actor_label, action, target_type, target_id, tenant_id, reason,
       before, after, request_id, outcome, staff.role AS staff_role
FROM audit_log
LEFT JOIN LATERAL (SELECT opsboard_operator_staff_role(audit_log.actor_id) AS role) staff ON true
WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(actor)s::text IS NULL OR (strpos(lower(actor_label), lower(%(actor)s::text)) > 0
                                   AND (%(scope_all)s OR staff.role IS NULL)))
  AND (%(action)s::text IS NULL OR action = %(action)s OR starts_with(action, %(action)s::text || '.'))
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR at < %(until)s)
  AND (%(target_type)s::text IS NULL OR target_type = %(target_type)s)
  AND (%(target_id)s::text IS NULL OR target_id = %(target_id)s)
  AND (%(after_at)s::timestamptz IS NULL OR (at, id) < (%(after_at)s, %(after_id)s::uuid))
ORDER BY at DESC, id DESC
LIMIT %(limit)s;

-- name: audit_action_list
-- The distinct actions recorded inside a scope, for the filter menu: a skip
-- scan over audit_log_action_idx (one probe per action, not a full scan).
WITH RECURSIVE actions AS (
    (SELECT action FROM audit_log
     WHERE (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
     ORDER BY action LIMIT 1)
    UNION ALL
    SELECT (SELECT a.action FROM audit_log a
            WHERE a.action > actions.action AND (%(scope_all)s OR a.tenant_id = ANY(%(scope_ids)s::uuid[]))
            ORDER BY a.action LIMIT 1)
    FROM actions WHERE actions.action IS NOT NULL
)
SELECT action FROM actions WHERE action IS NOT NULL;


-- name: audit_denied_recent
-- Whether this user's attempt at this action was already recorded as denied
-- within the last %(seconds)s seconds (the rate limit of denied rows).
SELECT EXISTS (
    SELECT 1 FROM audit_log
    WHERE outcome = 'denied' AND actor_id = %(actor_id)s AND action = %(action)s
      AND at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
) AS recent;

-- name: audit_staff_roles
-- The role of each of the given users who is operator staff (a member of an
-- operator tenant): tenant-scoped viewers see such staff by role, never by address.
-- (migration 0099's function: the operator tenants' memberships are outside a tenant's scope.)
SELECT u.id AS user_id, opsboard_operator_staff_role(u.id) AS role
FROM unnest(%(ids)s::uuid[]) AS u(id)
WHERE opsboard_operator_staff_role(u.id) IS NOT NULL;
