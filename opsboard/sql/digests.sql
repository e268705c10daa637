-- name: notification_digest_close
-- The flush of one digest (its head delivery's deliver job): close it when open and return it with
-- its first and last items (inbox titles, event types) and the recipient's time zone.  The row lock
-- orders it with the fan-out's upsert of the same key (notification_fanout_chunk): an item committed
-- before it is counted, one after it opens the next digest.  A second call (a retried job) closes
-- nothing and returns the same count.
WITH closed AS (
    UPDATE notification_digests
    SET status = 'closed', closed_at = coalesce(closed_at, coalesce(%(now)s::timestamptz, now()))
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s
    RETURNING *
)
SELECT c.*, fn.title AS first_title, ln.title AS last_title,
       fe.type AS first_event_type, le.type AS last_event_type, p.time_zone
FROM closed c
LEFT JOIN notifications fn ON fn.id = c.first_notification_id AND fn.tenant_id = c.tenant_id
LEFT JOIN notifications ln ON ln.id = c.last_notification_id AND ln.tenant_id = c.tenant_id
LEFT JOIN outbox_events fe ON fe.id = c.first_event_id AND fe.tenant_id = c.tenant_id
LEFT JOIN outbox_events le ON le.id = c.last_event_id AND le.tenant_id = c.tenant_id
LEFT JOIN notification_profiles p ON p.user_id = c.recipient_id;

-- name: notification_digests_pending
-- Open digests of the listed tenants (NULL: every tenant), the soonest flush first, for the
-- dashboard's notifications page.
SELECT g.id, g.tenant_id, t.slug AS tenant_slug, g.recipient_id, u.email AS recipient_email, g.channel,
       g.category, g.digest_key, g.kind, g.item_count, g.opened_at, g.flush_at, g.first_event_id
FROM notification_digests g
JOIN tenants t ON t.id = g.tenant_id
JOIN users u ON u.id = g.recipient_id
WHERE g.status = 'open' AND (%(tenant_ids)s::uuid[] IS NULL OR g.tenant_id = ANY(%(tenant_ids)s::uuid[]))
ORDER BY g.flush_at, g.id
LIMIT %(limit)s;

-- name: notification_digest_head_state
-- The head delivery as committed now (a statement after notification_digest_close: a flush that
-- waited for another's lock on the digest sees that it was handed over, and sends nothing).
SELECT status, provider_ref FROM deliveries WHERE id = %(id)s AND tenant_id = %(tenant_id)s;
