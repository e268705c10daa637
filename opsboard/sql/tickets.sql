-- name: ticket_counter_next
-- The tenant's next ticket number (the row lock serializes concurrent creations of one tenant).
INSERT INTO ticket_counters (tenant_id, last_number) VALUES (%(tenant_id)s, 1)
ON CONFLICT (tenant_id) DO UPDATE SET last_number = ticket_counters.last_number + 1
RETURNING last_number;

-- name: ticket_category_upsert
-- Create or rename a tenant's category.
INSERT INTO ticket_categories (id, tenant_id, slug, name, is_request, team)
VALUES (%(id)s, %(tenant_id)s, %(slug)s, %(name)s, %(is_request)s, %(team)s)
ON CONFLICT (tenant_id, slug) DO UPDATE SET name = EXCLUDED.name, is_request = EXCLUDED.is_request,
                                            team = EXCLUDED.team
RETURNING *;

-- name: ticket_category_list
-- Categories inside a tenant scope.
SELECT c.*, t.slug AS tenant_slug FROM ticket_categories c JOIN tenants t ON t.id = c.tenant_id
WHERE (%(scope_all)s OR c.tenant_id = ANY(%(scope_ids)s::uuid[]))
ORDER BY t.slug, c.slug;

-- name: ticket_category_get_by_slug
-- One category of a tenant by its slug.
SELECT * FROM ticket_categories WHERE tenant_id = %(tenant_id)s AND slug = %(slug)s;

-- name: sla_policy_upsert
-- Create or change a tenant's targets for one priority.
INSERT INTO sla_policies (id, tenant_id, priority, first_response_minutes, resolution_minutes, time_zone,
                          business_hours)
VALUES (%(id)s, %(tenant_id)s, %(priority)s, %(first_response_minutes)s, %(resolution_minutes)s,
        %(time_zone)s, %(business_hours)s)
ON CONFLICT (tenant_id, priority) DO UPDATE
SET first_response_minutes = EXCLUDED.first_response_minutes, resolution_minutes = EXCLUDED.resolution_minutes,
    time_zone = EXCLUDED.time_zone, business_hours = EXCLUDED.business_hours
RETURNING *;

-- name: sla_policy_get
-- A tenant's policy for one priority.
SELECT * FROM sla_policies WHERE tenant_id = %(tenant_id)s AND priority = %(priority)s;

-- name: sla_policy_get_by_id
-- One policy.
SELECT * FROM sla_policies WHERE id = %(id)s;

-- name: ticket_insert
-- A new ticket (status new) with its due times.
INSERT INTO tickets (id, tenant_id, number, subject, category_id, priority, requester_id, assignee_id, team,
                     sla_policy_id, first_response_due_at, resolution_due_at, created_at, updated_at)
VALUES (%(id)s, %(tenant_id)s, %(number)s, %(subject)s, %(category_id)s, %(priority)s, %(requester_id)s,
        %(assignee_id)s, %(team)s, %(sla_policy_id)s, %(first_response_due_at)s, %(resolution_due_at)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
RETURNING *;

-- name: ticket_get
-- One ticket inside a tenant scope, with names for the page and its SLA badge at now.
SELECT tk.*, tn.slug AS tenant_slug, tn.name AS tenant_name, c.slug AS category_slug, c.name AS category_name,
       c.is_request, ru.email AS requester_email, au.email AS assignee_email,
       p.first_response_minutes, p.resolution_minutes,
       ticket_sla_state(tk.status, tk.first_response_due_at, tk.resolution_due_at, tk.first_responded_at,
                        tk.paused_at, tk.first_response_breached_at, tk.resolution_breached_at,
                        p.first_response_minutes, p.resolution_minutes,
                        coalesce(%(now)s::timestamptz, now())) AS sla_state
FROM tickets tk
JOIN tenants tn ON tn.id = tk.tenant_id
JOIN users ru ON ru.id = tk.requester_id
LEFT JOIN users au ON au.id = tk.assignee_id
LEFT JOIN ticket_categories c ON c.id = tk.category_id
LEFT JOIN sla_policies p ON p.id = tk.sla_policy_id
WHERE tk.id = %(id)s AND (%(scope_all)s OR tk.tenant_id = ANY(%(scope_ids)s::uuid[]));

-- name: ticket_lock
-- One ticket inside a tenant scope, locked for a transition.
SELECT tk.*, c.is_request
FROM tickets tk LEFT JOIN ticket_categories c ON c.id = tk.category_id
WHERE tk.id = %(id)s AND (%(scope_all)s OR tk.tenant_id = ANY(%(scope_ids)s::uuid[]))
FOR UPDATE OF tk;

-- name: ticket_update
-- Write a ticket's mutable fields after a workflow action (the service computed them).
UPDATE tickets
SET status = %(status)s, priority = %(priority)s, assignee_id = %(assignee_id)s, sla_policy_id = %(sla_policy_id)s,
    first_response_due_at = %(first_response_due_at)s, resolution_due_at = %(resolution_due_at)s,
    first_responded_at = %(first_responded_at)s, paused_at = %(paused_at)s, paused_seconds = %(paused_seconds)s,
    decision = %(decision)s, decision_reason = %(decision_reason)s, resolution_code = %(resolution_code)s,
    resolution_summary = %(resolution_summary)s, resolved_at = %(resolved_at)s, closed_at = %(closed_at)s,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s
RETURNING *;

-- name: ticket_list
-- The agents' queue: newest first, keyset on id, every filter optional, inside a tenant scope.
-- service.list_queue runs it unprepared: each optional filter "%(x)s IS NULL OR ..." then folds away
-- in a plan made for the values given, so that each combination finds its index (0012: status,
-- tenant, assignee; 0015: trigram search; 0020: category, number, SLA state).  The SLA filter is
-- written as the 0020 partial indexes' predicates (same text, so the planner matches them) to find
-- the candidates in id order; ticket_sla_state still decides the badge.  The page's rows are chosen
-- first and only then joined to names: a misestimated filter cannot turn those joins into a
-- nested loop over every candidate.
SELECT q.*, tn.slug AS tenant_slug, c.slug AS category_slug, c.name AS category_name, au.email AS assignee_email
FROM (
SELECT tk.id, tk.tenant_id, tk.number, tk.subject, tk.priority, tk.status, tk.assignee_id, tk.team,
       tk.category_id, tk.created_at, tk.updated_at, tk.first_response_due_at, tk.resolution_due_at,
       ticket_sla_state(tk.status, tk.first_response_due_at, tk.resolution_due_at, tk.first_responded_at,
                        tk.paused_at, tk.first_response_breached_at, tk.resolution_breached_at,
                        p.first_response_minutes, p.resolution_minutes,
                        coalesce(%(now)s::timestamptz, now())) AS sla_state
FROM tickets tk
LEFT JOIN sla_policies p ON p.id = tk.sla_policy_id
WHERE (%(scope_all)s OR tk.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(tenant_id)s::uuid IS NULL OR tk.tenant_id = %(tenant_id)s::uuid)
  AND (%(status)s::ticket_status IS NULL OR tk.status = %(status)s::ticket_status)
  AND (%(open_only)s IS NOT TRUE OR tk.status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer'))
  AND (%(category)s::text IS NULL
       OR tk.category_id IN (SELECT cc.id FROM ticket_categories cc WHERE cc.slug = %(category)s::text))
  AND (%(assignee_id)s::uuid IS NULL OR tk.assignee_id = %(assignee_id)s::uuid)
  AND (%(unassigned)s IS NOT TRUE OR tk.assignee_id IS NULL)
  AND (%(search)s::text IS NULL OR tk.subject_search ILIKE %(search_pattern)s::text
       OR (%(search_number)s::bigint IS NOT NULL AND tk.number = %(search_number)s::bigint))
  AND (%(after_id)s::uuid IS NULL OR tk.id < %(after_id)s::uuid)
  AND (%(sla_state)s::text IS NULL
       OR (%(sla_state)s::text = 'breached'
           AND (tk.first_response_breached_at IS NOT NULL OR tk.resolution_breached_at IS NOT NULL))
       OR (%(sla_state)s::text IN ('breached', 'at_risk', 'on_track')
           AND tk.first_response_breached_at IS NULL AND tk.resolution_breached_at IS NULL AND tk.paused_at IS NULL
           AND tk.status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer')
           AND (%(sla_state)s::text <> 'breached'
                OR (CASE WHEN tk.first_responded_at IS NULL THEN tk.first_response_due_at ELSE tk.resolution_due_at END)
                   <= coalesce(%(now)s::timestamptz, now()))
           -- at risk: due within the next quarter of the longest target of any policy
           AND (%(sla_state)s::text <> 'at_risk'
                OR (CASE WHEN tk.first_responded_at IS NULL THEN tk.first_response_due_at ELSE tk.resolution_due_at END)
                   BETWEEN coalesce(%(now)s::timestamptz, now())
                       AND coalesce(%(now)s::timestamptz, now()) + make_interval(secs => 15 * (
                           SELECT coalesce(max(greatest(sp.first_response_minutes, sp.resolution_minutes)), 0)
                           FROM sla_policies sp))))
       OR (%(sla_state)s::text = 'paused'
           AND tk.first_response_breached_at IS NULL AND tk.resolution_breached_at IS NULL AND tk.paused_at IS NOT NULL
           AND tk.status IN ('new', 'triaged', 'in_progress', 'waiting_on_customer'))
       OR (%(sla_state)s::text = 'met' AND tk.status IN ('resolved', 'closed', 'cancelled')))
  AND (%(sla_state)s::text IS NULL
       OR ticket_sla_state(tk.status, tk.first_response_due_at, tk.resolution_due_at, tk.first_responded_at,
                           tk.paused_at, tk.first_response_breached_at, tk.resolution_breached_at,
                           p.first_response_minutes, p.resolution_minutes,
                           coalesce(%(now)s::timestamptz, now())) = %(sla_state)s::text)
ORDER BY tk.id DESC
LIMIT %(limit)s
) q
JOIN tenants tn ON tn.id = q.tenant_id
LEFT JOIN users au ON au.id = q.assignee_id
LEFT JOIN ticket_categories c ON c.id = q.category_id
ORDER BY q.id DESC;

-- name: ticket_list_for_requester
-- A requester's own tickets in one tenant, newest first (keyset on id).
SELECT tk.id, tk.number, tk.subject, tk.priority, tk.status, tk.created_at, tk.updated_at,
       c.slug AS category_slug
FROM tickets tk LEFT JOIN ticket_categories c ON c.id = tk.category_id
WHERE tk.tenant_id = %(tenant_id)s AND tk.requester_id = %(requester_id)s
  AND (%(after_id)s::uuid IS NULL OR tk.id < %(after_id)s::uuid)
ORDER BY tk.id DESC
LIMIT %(limit)s;

-- name: ticket_message_insert
-- One message on a ticket.
INSERT INTO ticket_messages (id, tenant_id, ticket_id, kind, author_id, author_label, body, created_at)
VALUES (%(id)s, %(tenant_id)s, %(ticket_id)s, %(kind)s, %(author_id)s, %(author_label)s, %(body)s,
        coalesce(%(now)s::timestamptz, now()))
RETURNING *;

-- name: ticket_message_list
-- A ticket's timeline as the viewer may see it: internal notes only for an active admin or
-- support_agent of the ticket's tenant (or of an operator tenant).  Enforced here, in the query,
-- so no caller can forget it.
SELECT m.* FROM ticket_messages m JOIN tickets tk ON tk.id = m.ticket_id
WHERE m.ticket_id = %(ticket_id)s AND (%(scope_all)s OR tk.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (m.kind <> 'internal_note' OR EXISTS (
        SELECT 1 FROM memberships ms JOIN tenants mt ON mt.id = ms.tenant_id
        WHERE ms.user_id = %(viewer_id)s::uuid AND ms.active AND ms.role IN ('admin', 'support_agent')
          AND (ms.tenant_id = tk.tenant_id OR mt.is_operator)))
ORDER BY m.id;

-- name: ticket_message_list_public
-- A ticket's timeline for its requester (customer API, customer notifications): never an internal note.
SELECT m.id, m.kind, m.author_label, m.body, m.created_at FROM ticket_messages m
JOIN tickets tk ON tk.id = m.ticket_id
WHERE m.ticket_id = %(ticket_id)s AND tk.tenant_id = %(tenant_id)s AND tk.requester_id = %(requester_id)s
  AND m.kind <> 'internal_note'
ORDER BY m.id;

-- name: ticket_attachment_insert
-- One attachment of a message.
INSERT INTO ticket_attachments (id, tenant_id, ticket_id, message_id, filename, content_type, size_bytes, sha256,
                                storage_key)
VALUES (%(id)s, %(tenant_id)s, %(ticket_id)s, %(message_id)s, %(filename)s, %(content_type)s, %(size_bytes)s,
        %(sha256)s, %(storage_key)s)
RETURNING *;

-- name: ticket_attachment_list
-- A ticket's attachments on the messages the viewer may see (same rule as ticket_message_list).
SELECT a.* FROM ticket_attachments a
JOIN ticket_messages m ON m.id = a.message_id JOIN tickets tk ON tk.id = a.ticket_id
WHERE a.ticket_id = %(ticket_id)s AND (%(scope_all)s OR tk.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (m.kind <> 'internal_note' OR EXISTS (
        SELECT 1 FROM memberships ms JOIN tenants mt ON mt.id = ms.tenant_id
        WHERE ms.user_id = %(viewer_id)s::uuid AND ms.active AND ms.role IN ('admin', 'support_agent')
          AND (ms.tenant_id = tk.tenant_id OR mt.is_operator)))
ORDER BY a.id;

-- name: ticket_attachment_list_public
-- A ticket's attachments for its requester: never one on an internal note.
SELECT a.* FROM ticket_attachments a
JOIN ticket_messages m ON m.id = a.message_id JOIN tickets tk ON tk.id = a.ticket_id
WHERE a.ticket_id = %(ticket_id)s AND tk.tenant_id = %(tenant_id)s AND tk.requester_id = %(requester_id)s
  AND m.kind <> 'internal_note'
ORDER BY a.id;

-- name: ticket_sla_breach_first_response
-- The breach job at the first-response due time: marks the breach once, and only if the due time
-- it was planned for is still the ticket's, unanswered, unpaused and open.
UPDATE tickets SET first_response_breached_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND first_response_breached_at IS NULL AND first_responded_at IS NULL
  AND paused_at IS NULL AND status IN ('new', 'triaged', 'in_progress')
  AND first_response_due_at = %(due_at)s AND first_response_due_at <= coalesce(%(now)s::timestamptz, now())
RETURNING *;

-- name: ticket_sla_breach_resolution
-- The breach job at the resolution due time (same rules).
UPDATE tickets SET resolution_breached_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND resolution_breached_at IS NULL
  AND paused_at IS NULL AND status IN ('new', 'triaged', 'in_progress')
  AND resolution_due_at = %(due_at)s AND resolution_due_at <= coalesce(%(now)s::timestamptz, now())
RETURNING *;

-- name: ticket_agents_of_tenant
-- Active agents who can work a tenant's tickets (theirs, or operator staff): the assign menu, by email.
SELECT DISTINCT u.id, u.email FROM memberships ms JOIN users u ON u.id = ms.user_id
JOIN tenants mt ON mt.id = ms.tenant_id
WHERE (ms.tenant_id = %(tenant_id)s OR mt.is_operator) AND ms.active AND u.is_active
  AND ms.role IN ('admin', 'support_agent')
ORDER BY u.email;

-- name: ticket_round_robin_next
-- The next agent after the tenant's last round-robin pick (wrapping), and remember it.
WITH agents AS (
    SELECT DISTINCT u.id FROM memberships ms JOIN users u ON u.id = ms.user_id
    WHERE ms.tenant_id = %(tenant_id)s AND ms.active AND u.is_active AND ms.role = 'support_agent'
), pick AS (
    SELECT coalesce(
        (SELECT a.id FROM agents a, ticket_counters c WHERE c.tenant_id = %(tenant_id)s
           AND c.last_assignee_id IS NOT NULL AND a.id > c.last_assignee_id ORDER BY a.id LIMIT 1),
        (SELECT min(a.id::text)::uuid FROM agents a)) AS id
)
UPDATE ticket_counters c SET last_assignee_id = pick.id FROM pick
WHERE c.tenant_id = %(tenant_id)s AND pick.id IS NOT NULL
RETURNING pick.id;

-- name: ticket_sla_compliance_rows
-- The SLA compliance report (reports.define_kind): per category and priority, resolved tickets
-- and those breached.
SELECT coalesce(c.slug, '-') AS category, tk.priority::text AS priority, count(*) AS tickets,
       count(*) FILTER (WHERE tk.first_response_breached_at IS NOT NULL) AS first_response_breached,
       count(*) FILTER (WHERE tk.resolution_breached_at IS NOT NULL) AS resolution_breached
FROM tickets tk LEFT JOIN ticket_categories c ON c.id = tk.category_id
WHERE tk.tenant_id = %(tenant_id)s
GROUP BY 1, 2 ORDER BY 1, 2;

-- name: ticket_notify_facts
-- Who a ticket event notifies: its requester and assignee.
SELECT id, tenant_id, requester_id, assignee_id FROM tickets WHERE id = %(id)s::uuid;

-- name: ticket_notify_variables
-- What a ticket notification says (number, subject, status), read inside the event's tenant only:
-- an event naming another tenant's ticket renders no ticket text.
SELECT id, number, subject, status::text AS status, priority::text AS priority, requester_id, assignee_id
FROM tickets WHERE id = %(id)s::uuid AND tenant_id = %(tenant_id)s;

-- name: ticket_message_notify_excerpt
-- The start of a message for its notification, inside the event's tenant (internal notes are
-- filtered by the caller: never for the requester).
SELECT kind::text AS kind, left(body, %(limit)s) AS excerpt, length(body) > %(limit)s AS truncated
FROM ticket_messages WHERE id = %(id)s::uuid AND tenant_id = %(tenant_id)s;

-- name: ticket_message_author
-- The author of a message (not notified of their own message).
SELECT author_id, kind FROM ticket_messages WHERE id = %(id)s::uuid;

-- name: rate_limit_portal_prune_full
-- The customers' write buckets of the ticket pages (web.portal, one per user who wrote) that are full
-- again: deleting one changes nothing (the next take starts a full bucket), so the table keeps only
-- customers who wrote lately.  The fullness is checked on the deleted row itself, so a take that got
-- in first (row lock, re-check) keeps its bucket.
DELETE FROM rate_limits r
WHERE r.name IN (SELECT name FROM rate_limits
                 WHERE starts_with(name, 'portal:')
                   AND tokens + greatest(0, extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - updated_at))
                       * refill_rate >= capacity
                 LIMIT %(limit)s)
  AND starts_with(r.name, 'portal:')
  AND r.tokens + greatest(0, extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - r.updated_at)) * r.refill_rate
      >= r.capacity
RETURNING r.name;
