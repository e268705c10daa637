-- name: notification_recipient_locales
-- The own locale of each listed user (NULL: none), to render per-user texts before the chunk statement:
-- their notification locale, else their dashboard's (issue 43; the tenant's default comes after).
SELECT u.id AS user_id, coalesce(p.locale, u.locale) AS locale
FROM users u LEFT JOIN notification_profiles p ON p.user_id = u.id
WHERE u.id = ANY(%(user_ids)s::uuid[]);

-- name: notification_audience_members
-- One page of a broadcast audience: the tenant's active members (in %(roles)s, when not NULL) with a
-- user id after %(after)s, in user-id order, at most %(limit)s (memberships_tenant_user_idx: one range).
SELECT DISTINCT m.user_id FROM memberships m
WHERE m.tenant_id = %(tenant_id)s AND m.active
  AND (%(roles)s::text[] IS NULL OR m.role::text = ANY(%(roles)s::text[]))
  AND m.user_id > coalesce(%(after)s::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
ORDER BY m.user_id LIMIT %(limit)s;

-- name: notification_fanout_chunk
-- One chunk of an event's recipients, set-based: decide every channel of every
-- recipient and write deliveries and deliver jobs in one statement; the inbox
-- rows it names are written afterwards by notification_inbox_insert, under the
-- inbox lock (the lock is held from that insert to the commit only, not while
-- this statement runs).  It returns them: the recipients, their pre-made inbox
-- ids and text keys (array literals), of those whose inbox channel passed.
-- The inbox row is the inbox channel's delivery (migration 0056): no deliveries
-- row for it, except when the channel was suppressed (status and reason).
-- A recipient who has a delivery or an inbox row of the event already is left
-- out whole: a second relay of the event adds nothing.  Probes of the unique
-- keys, under the caller's page lock (notification_fanout_page_lock), instead of
-- ON CONFLICT: its speculative insertion wrote a confirmation record per
-- delivery.  Were a row of a recipient written meanwhile by a fan-out that does
-- not hold that lock (an overlapping page), a unique key refuses the second and
-- its page is retried.
-- The rules, in order, the first that fails being the suppression reason
-- (opsboard.notifications.policy.check is the same rule set for one recipient):
-- permission (active user holding a granting role in the tenant or the operator
-- tenant; %(granting_roles)s NULL: any role) -> membership (active) -> preference
-- (the user's, else the tenant default, else on; ignored for a critical category)
-- -> unreachable (no email / phone / active push device; another channel's address is looked
-- for by its deliver job) -> sensitivity (sensitive content: %(sensitivity_refused)s, the channels
-- that carry it only for an approved category, SMS; %(generic_channels)s show a generic title, push;
-- opsboard.channels.sensitive_rules).  Quiet hours
-- defer a non-inbox channel of a non-critical category to the window's end.
-- Digests (migration 0076, opsboard.notifications.digest; the decision is
-- opsboard.notifications.policy.digest_kind): a passing non-inbox channel of a non-critical
-- category is collected when the policy digests (%(digest_kind)s 'window' or 'schedule', keyed
-- by %(digest_key)s) or the recipient is in quiet hours ('quiet'): the upsert of the open digest
-- of (recipient, channel, category, key) either opens one -- its id is this delivery's, which is
-- queued with its job at the digest's flush time (the head) -- or counts the item in the open one,
-- and the delivery is written 'digested', naming it, without a job.  Rows are upserted in
-- (recipient, channel) order, so two fan-outs over the same recipients lock the open digests in
-- one order.
-- %(delivery_ids)s holds n_users x n_channels pre-made ids (user-major, channel
-- order of %(channels)s); a queued delivery's job has the delivery's id, which is
-- what keeps it one job per delivery (jobs_pkey): no idempotency key, one index
-- entry less per job.  A delivery names its inbox row by the pre-made id that
-- notification_inbox_insert writes later in the same transaction (NULL when the
-- inbox channel did not pass; migration 0055).
WITH
chunk AS (
    -- LIMIT 1 keeps each probe a nested loop over the unique keys (event first) of deliveries and
    -- notifications; the inbox row's probe only for a recipient without a delivery row.
    SELECT x.user_id, x.inbox_id, x.ord
    FROM unnest(%(user_ids)s::uuid[], %(inbox_ids)s::uuid[]) WITH ORDINALITY AS x(user_id, inbox_id, ord)
    LEFT JOIN LATERAL (SELECT true AS found FROM deliveries d
                       WHERE d.event_id = %(event_id)s AND d.recipient_id = x.user_id LIMIT 1) e ON true
    LEFT JOIN LATERAL (SELECT true AS found FROM notifications n
                       WHERE e.found IS NULL AND n.event_id = %(event_id)s AND n.recipient_id = x.user_id
                       LIMIT 1) i ON true
    WHERE e.found IS NULL AND i.found IS NULL
),
operator_tenants AS (
    -- Read once per statement: a member of an operator tenant is a recipient's membership too.
    SELECT coalesce(array_agg(id), '{}') AS ids FROM tenants WHERE is_operator
),
defaults AS (
    SELECT coalesce(jsonb_object_agg(channel, enabled), '{}') AS prefs FROM notification_preferences
    WHERE tenant_id = %(tenant_id)s AND category = %(category)s AND user_id IS NULL
),
devices AS (
    SELECT s.user_ref, count(*) AS n FROM push_subscriptions s
    WHERE s.tenant_id = %(tenant_id)s AND s.state = 'active'
      AND s.user_ref = ANY(SELECT user_id::text FROM chunk)
    GROUP BY s.user_ref
),
facts AS (
    SELECT c.user_id, c.inbox_id, c.ord, u.email,
           u.is_active AND mm.roles IS NOT NULL
             AND (%(granting_roles)s::text[] IS NULL OR mm.roles && %(granting_roles)s::text[]) AS has_permission,
           coalesce(mm.active, false) AS membership_active,
           coalesce(own.prefs, '{}'::jsonb) AS own_prefs,
           coalesce(p.locale, u.locale) AS user_locale, p.phone, coalesce(dv.n, 0) AS devices,
           coalesce(p.time_zone, q.time_zone) AS time_zone,
           CASE WHEN q.user_id IS NOT NULL
                THEN opsboard_quiet_until(coalesce(%(now)s::timestamptz, now()), q.time_zone, q.start_time,
                                          q.end_time, q.days) END AS quiet_until
    FROM chunk c
    JOIN users u ON u.id = c.user_id
    LEFT JOIN LATERAL (
        -- The user's memberships (memberships_pkey, one range) in this tenant or an operator tenant,
        -- filtered there: no tenants probe per membership, and no DISTINCT (a sort per recipient) --
        -- a repeated role changes neither the overlap test nor "has a role" (less CPU and fewer
        -- buffer hits per recipient).
        SELECT array_agg(m.role::text) AS roles, bool_or(m.active) AS active
        FROM memberships m
        WHERE m.user_id = c.user_id
          AND (m.tenant_id = %(tenant_id)s OR m.tenant_id = ANY ((SELECT ids FROM operator_tenants)::uuid[]))
    ) mm ON true
    LEFT JOIN LATERAL (
        SELECT jsonb_object_agg(np.channel, np.enabled) AS prefs FROM notification_preferences np
        WHERE np.tenant_id = %(tenant_id)s AND np.category = %(category)s AND np.user_id = c.user_id
    ) own ON true
    LEFT JOIN notification_profiles p ON p.user_id = c.user_id
    LEFT JOIN quiet_hours q ON q.user_id = c.user_id AND q.enabled
    LEFT JOIN devices dv ON dv.user_ref = c.user_id::text
),
decided AS (
    SELECT f.*, ch.channel, ch.idx,
           CASE WHEN NOT f.has_permission THEN 'permission'
                WHEN NOT f.membership_active THEN 'membership'
                WHEN NOT %(critical)s
                     AND NOT coalesce((f.own_prefs ->> ch.channel)::boolean,
                                      ((SELECT prefs FROM defaults) ->> ch.channel)::boolean, true)
                     THEN 'preference'
                WHEN (ch.channel = 'email' AND coalesce(f.email, '') = '')
                     OR (ch.channel = 'sms' AND coalesce(f.phone, '') = '')
                     OR (ch.channel = 'push' AND f.devices = 0) THEN 'unreachable'
                WHEN ch.channel = ANY(%(sensitivity_refused)s::text[]) THEN 'sensitivity'
           END AS reason
    FROM facts f CROSS JOIN unnest(%(channels)s::text[]) WITH ORDINALITY AS ch(channel, idx)
),
new_inbox AS (
    -- The inbox rows notification_inbox_insert will write, with their text: keyed by user id
    -- (per-user variables) or by locale key.
    SELECT y.user_id, y.inbox_id, y.k, %(texts)s::jsonb -> y.k AS t
    FROM (SELECT d.user_id, d.inbox_id,
                 CASE WHEN %(per_user)s THEN d.user_id::text
                      WHEN d.user_locale = ANY(%(text_locales)s::text[]) THEN d.user_locale ELSE '' END AS k
          FROM decided d WHERE d.channel = 'inbox' AND d.reason IS NULL) y
),
digests AS (
    INSERT INTO notification_digests AS g (id, tenant_id, recipient_id, channel, category, digest_key, kind,
                                           opened_at, flush_at, first_event_id, last_event_id,
                                           first_notification_id, last_notification_id, last_at)
    SELECT (%(delivery_ids)s::uuid[])[(d.ord - 1) * cardinality(%(channels)s::text[]) + d.idx],
           %(tenant_id)s, d.user_id, d.channel, %(category)s, %(digest_key)s,
           coalesce(%(digest_kind)s::text, 'quiet'), coalesce(%(now)s::timestamptz, now()),
           opsboard_digest_flush_at(coalesce(%(now)s::timestamptz, now()), coalesce(%(digest_kind)s::text, 'quiet'),
                                    %(digest_seconds)s::integer, %(digest_at)s::time, d.time_zone, d.quiet_until),
           %(event_id)s, %(event_id)s, ni.inbox_id, ni.inbox_id, coalesce(%(now)s::timestamptz, now())
    FROM decided d
    LEFT JOIN new_inbox ni ON ni.user_id = d.user_id
    WHERE d.reason IS NULL AND d.channel <> 'inbox' AND NOT %(critical)s
      AND (%(digest_kind)s::text IS NOT NULL OR d.quiet_until IS NOT NULL)
    ORDER BY d.user_id, d.channel
    ON CONFLICT (tenant_id, recipient_id, channel, category, digest_key) WHERE status = 'open'
    DO UPDATE SET item_count = g.item_count + 1, last_event_id = excluded.last_event_id,
                  last_notification_id = excluded.last_notification_id, last_at = excluded.last_at
    RETURNING g.id, g.recipient_id, g.channel, g.flush_at
),
new_deliveries AS (
    INSERT INTO deliveries (id, tenant_id, recipient_id, event_id, event_type, notification_id, channel, status,
                            suppression_reason, deferred_until, generic, template_key, template_version, locale,
                            job_id, digest_id, created_at, updated_at)
    SELECT d.delivery_id, %(tenant_id)s, d.user_id, %(event_id)s, %(event_type)s, ni.inbox_id, d.channel,
           CASE WHEN d.reason IS NOT NULL THEN 'suppressed' WHEN d.channel = 'inbox' THEN 'delivered'
                WHEN dg.id IS NOT NULL AND dg.id <> d.delivery_id THEN 'digested'
                ELSE 'queued' END,
           d.reason,
           CASE WHEN dg.id = d.delivery_id THEN dg.flush_at
                WHEN dg.id IS NOT NULL THEN NULL
                WHEN d.reason IS NULL AND d.channel <> 'inbox' AND NOT %(critical)s THEN d.quiet_until END,
           d.reason IS NULL AND d.channel = ANY(%(generic_channels)s::text[]),   -- sensitive: a generic title, always
           %(template_key)s, NULL, coalesce(d.user_locale, %(tenant_locale)s),
           CASE WHEN d.reason IS NULL AND d.channel <> 'inbox' AND (dg.id IS NULL OR dg.id = d.delivery_id)
                THEN d.delivery_id END,
           dg.id,
           coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now())
    FROM (SELECT x.*, (%(delivery_ids)s::uuid[])[(x.ord - 1) * cardinality(%(channels)s::text[]) + x.idx]
                      AS delivery_id FROM decided x) d
    LEFT JOIN new_inbox ni ON ni.user_id = d.user_id
    LEFT JOIN digests dg ON dg.recipient_id = d.user_id AND dg.channel = d.channel
    WHERE d.channel <> 'inbox' OR d.reason IS NOT NULL
    RETURNING id, status, deferred_until
),
new_jobs AS (
    -- A job per new queued delivery, its id the delivery's (made for this statement: no job can hold
    -- it yet).  No ON CONFLICT: its arbiter probe and the speculative insertion's confirmation record
    -- (one WAL record per job) bought nothing; were the id ever taken, the page fails and its job
    -- retries, it is never skipped silently.
    INSERT INTO jobs (id, type, version, tenant_id, queue, priority, payload, max_attempts,
                      available_at, expires_at, correlation_id, event_id)
    SELECT nd.id, %(job_type)s, %(job_version)s, %(tenant_id)s, %(job_queue)s, %(job_priority)s,
           jsonb_build_object('delivery_id', nd.id::text), %(job_max_attempts)s,
           coalesce(nd.deferred_until, now()), %(job_expires_at)s::timestamptz, %(correlation_id)s,
           %(event_id)s
    FROM new_deliveries nd WHERE nd.status = 'queued'
    RETURNING id
)
SELECT (SELECT count(*) FROM new_deliveries) AS deliveries,
       (SELECT count(*) FROM new_deliveries WHERE status = 'suppressed') AS suppressed,
       (SELECT count(*) FROM new_deliveries WHERE status = 'digested') AS digested,
       (SELECT count(*) FROM new_jobs) AS jobs,
       (SELECT coalesce(array_agg(user_id ORDER BY user_id), '{}')::text FROM new_inbox) AS inbox_users,
       (SELECT coalesce(array_agg(inbox_id ORDER BY user_id), '{}')::text FROM new_inbox) AS inbox_ids,
       (SELECT coalesce(array_agg(k ORDER BY user_id), '{}')::text FROM new_inbox) AS inbox_keys;

-- name: notification_fanout_page_lock
-- One fan-out of an event's page at a time (%(page)s: the broadcast page's first user id after
-- which it reads, '' for the whole recipient list): a second relay of the same page waits here for
-- the first to commit, then its statements see the first's rows and it adds nothing.  Held to the
-- commit.  Pages of one broadcast hold different keys (their recipients are disjoint).
SELECT pg_advisory_xact_lock(hashtextextended('opsboard.fanout:' || %(event_id)s::text || ':' || %(page)s, 0));

-- name: notification_inbox_insert
-- The inbox rows of one chunk (notification_fanout_chunk named them: recipient, pre-made id, text key
-- into %(texts)s), taken in user-id order after the inbox lock.  Returns how many were written and
-- the first %(notify_limit)s recipients (for NOTIFY).
-- Each row is also the recipient's inbox delivery (migration 0056: notification_deliveries).
-- Neither a probe nor ON CONFLICT: the chunk statement left out every recipient with a delivery or
-- an inbox row of the event, under the page lock, and that statement's deliveries of these
-- recipients name these ids; a row of one of them written meanwhile (an overlapping page) is refused
-- by a unique key, loudly, and the page retried -- never a delivery naming an inbox row that is not
-- there (migration 0055).
WITH new_inbox AS (
    INSERT INTO notifications (id, tenant_id, recipient_id, event_id, event_type, category, template_key,
                               template_version, template_own, locale, title, body, data, created_at)
    SELECT x.inbox_id, %(tenant_id)s, x.user_id, %(event_id)s, %(event_type)s, %(category)s, %(template_key)s,
           (t.t ->> 'version')::integer, (t.t ->> 'own')::boolean, t.t ->> 'locale', t.t ->> 'title',
           t.t ->> 'body',
           -- the link of the row's object (render.object_link), when it has one
           CASE WHEN t.t ->> 'link' IS NULL THEN %(data)s::jsonb
                ELSE %(data)s::jsonb || jsonb_build_object('link', t.t ->> 'link') END,
           coalesce(%(now)s::timestamptz, now())
    FROM unnest(%(inbox_users)s::uuid[], %(inbox_ids)s::uuid[], %(inbox_keys)s::text[]) AS x(user_id, inbox_id, k)
    CROSS JOIN LATERAL (SELECT %(texts)s::jsonb -> x.k AS t) t
    ORDER BY x.user_id
    RETURNING recipient_id
)
SELECT (SELECT count(*) FROM new_inbox) AS inbox,
       (SELECT coalesce(array_agg(recipient_id::text ORDER BY recipient_id), '{}') FROM
          (SELECT recipient_id FROM new_inbox LIMIT %(notify_limit)s) r) AS recipients;


-- name: notification_preference_set
-- Set one preference (user_id NULL: the tenant default).
INSERT INTO notification_preferences (tenant_id, user_id, category, channel, enabled)
VALUES (%(tenant_id)s, %(user_id)s, %(category)s, %(channel)s, %(enabled)s)
ON CONFLICT (tenant_id, user_id, category, channel) DO UPDATE SET enabled = excluded.enabled, updated_at = now()
RETURNING *;

-- name: notification_preference_list
-- A user's own preferences and the tenant defaults, for the settings view.
SELECT user_id, category, channel, enabled FROM notification_preferences
WHERE tenant_id = %(tenant_id)s AND (user_id IS NULL OR user_id = %(user_id)s)
ORDER BY category, channel, user_id NULLS FIRST;

-- name: quiet_hours_set
-- Set (or replace) a user's quiet hours.
INSERT INTO quiet_hours (user_id, time_zone, start_time, end_time, days, enabled)
VALUES (%(user_id)s, %(time_zone)s, %(start_time)s, %(end_time)s, %(days)s, %(enabled)s)
ON CONFLICT (user_id) DO UPDATE SET time_zone = excluded.time_zone, start_time = excluded.start_time,
    end_time = excluded.end_time, days = excluded.days, enabled = excluded.enabled
RETURNING *;

-- name: quiet_hours_get
-- A user's quiet hours (enabled or not), for the settings page.
SELECT * FROM quiet_hours WHERE user_id = %(user_id)s;

-- name: notification_profile_set
-- Set a user's locale, phone and time zone.
INSERT INTO notification_profiles (user_id, locale, phone, time_zone)
VALUES (%(user_id)s, %(locale)s, %(phone)s, coalesce(%(time_zone)s, 'Asia/Tehran'))
ON CONFLICT (user_id) DO UPDATE SET locale = excluded.locale, phone = excluded.phone,
    time_zone = excluded.time_zone, updated_at = now()
RETURNING *;

-- name: notification_profile_set_locale
-- Set only a user's notification locale (NULL: follow their dashboard's language, then the tenant's).
INSERT INTO notification_profiles (user_id, locale) VALUES (%(user_id)s, %(locale)s)
ON CONFLICT (user_id) DO UPDATE SET locale = excluded.locale, updated_at = now()
RETURNING *;

-- name: notification_profile_get
-- A user's notification language as set, their dashboard's, and the tenant's default (the chain's links).
SELECT u.id AS user_id, p.locale, u.locale AS dashboard_locale,
       coalesce((SELECT default_locale FROM notification_tenant_settings WHERE tenant_id = %(tenant_id)s), 'fa')
           AS tenant_locale
FROM users u LEFT JOIN notification_profiles p ON p.user_id = u.id
WHERE u.id = %(user_id)s;

-- name: notification_tenant_locale_set
-- Set a tenant's default notification locale (the chain's second link; issue 43).
INSERT INTO notification_tenant_settings (tenant_id, default_locale) VALUES (%(tenant_id)s, %(locale)s)
ON CONFLICT (tenant_id) DO UPDATE SET default_locale = excluded.default_locale
RETURNING *;

-- name: notification_tenant_locale
-- The tenant's default locale ('fa' when unset).
SELECT coalesce((SELECT default_locale FROM notification_tenant_settings WHERE tenant_id = %(tenant_id)s), 'fa')
       AS locale;

-- name: notification_insert_lock
-- Serialize inbox inserts until commit, so seq (the cursor) order is commit order.  Taken right
-- before the insert: whatever else the transaction writes comes before it (fan-out: the deliveries
-- and jobs of the whole page), so the lock is held for the insert and the commit only.
SELECT pg_advisory_xact_lock(7957911069121085795);

-- name: delivery_load
-- A delivery with its inbox row and the recipient's contact details, for the deliver job.
SELECT d.*, n.title AS inbox_title, n.body AS inbox_body, n.data AS inbox_data, n.category, u.email, p.phone,
       coalesce(p.locale, u.locale) AS user_locale
FROM deliveries d
JOIN users u ON u.id = d.recipient_id
LEFT JOIN notifications n ON n.id = d.notification_id
LEFT JOIN notification_profiles p ON p.user_id = d.recipient_id
WHERE d.id = %(id)s AND d.tenant_id = %(tenant_id)s;

-- name: delivery_mark
-- Move a queued delivery that was never handed over to failed or suppressed (the deliver job's
-- own refusals), with what was used.
UPDATE deliveries SET status = %(status)s, suppression_reason = %(reason)s, provider_ref = %(ref)s,
       error_code = %(error_code)s, template_version = coalesce(%(template_version)s, template_version),
       template_own = coalesce(%(template_own)s, template_own),
       locale = coalesce(%(locale)s, locale), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status = 'queued' AND provider_ref IS NULL AND %(status)s IN ('failed', 'suppressed')
RETURNING *;

-- name: delivery_hand_over
-- The deliver job handed a queued delivery to its provider job(s): remember the outbound message
-- id (or "N device(s)" for push), the template version and locale.  It stays queued until the
-- provider answers (sent / failed / expired); a second hand-over finds provider_ref set and
-- changes nothing.
UPDATE deliveries SET provider_ref = %(ref)s, template_version = coalesce(%(template_version)s, template_version),
       template_own = coalesce(%(template_own)s, template_own),
       locale = coalesce(%(locale)s, locale), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status = 'queued' AND provider_ref IS NULL
RETURNING *;

-- name: delivery_confirm
-- The provider's word about a delivery (the SMS gateway's report): monotonic -- queued moves to
-- any later state, sent only to a final one (delivered / failed / bounced / expired), a final
-- state never changes, so a late or repeated answer is a no-op.
UPDATE deliveries SET status = %(status)s, error_code = %(error_code)s,
       updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND tenant_id = %(tenant_id)s
  AND %(status)s IN ('sent', 'delivered', 'failed', 'bounced', 'expired')
  AND (status = 'queued' OR (status = 'sent' AND %(status)s <> 'sent'))
RETURNING *;

-- name: delivery_report_by_message
-- A report that names only the outbound message (an email DSN carries the Message-ID we made of
-- it): the delivery handed that message, in the message's own tenant, moves on monotonically
-- (as delivery_confirm).  The caller authenticated the reporter; the message id (UUIDv7) is the
-- only key, and the tenant is the message's, never the caller's word.
UPDATE deliveries d SET status = %(status)s, error_code = %(error_code)s,
       updated_at = coalesce(%(now)s::timestamptz, now())
FROM outbound_messages m
WHERE m.id = %(message_id)s AND m.channel = %(channel)s
  AND d.provider_ref = m.id::text AND d.tenant_id = m.tenant_id AND d.channel = m.channel
  AND %(status)s IN ('delivered', 'failed', 'bounced', 'expired')
  AND d.status IN ('queued', 'sent')
RETURNING d.id, d.tenant_id, d.status;

-- name: delivery_push_confirm
-- A Web Push of an inbox row was accepted (sent: the push service gives no receipt), refused for
-- good (failed) or found gone (expired: 404/410) by the push service.  First answer wins, except
-- that one device's acceptance wins over another's refusal, whatever their order.  Found through
-- the inbox row's (recipient, event), the deliveries' unique key.
UPDATE deliveries d SET status = %(status)s, error_code = %(error_code)s,
       updated_at = coalesce(%(now)s::timestamptz, now())
FROM notifications n
WHERE n.id = %(notification_id)s AND n.tenant_id = %(tenant_id)s
  AND d.recipient_id = n.recipient_id AND d.event_id = n.event_id AND d.channel = 'push'
  AND %(status)s IN ('sent', 'failed', 'expired')
  AND (d.status = 'queued' OR (d.status IN ('failed', 'expired') AND %(status)s = 'sent'))
RETURNING d.id, d.status;

-- name: delivery_push_reopen
-- An operator replays a dead push.send job (jobtypes' on_replay, in the replay's transaction;
-- %(payload)s is the dead job's): the push delivery of its inbox row, failed (by that job or by
-- another device's), goes back to queued, so the replay's answer is the one recorded (sent, or
-- failed again; the safety net fails it if the replay dies unheard).  A push of no inbox row, or a
-- delivery expired (the device is gone), moves nothing.
UPDATE deliveries d SET status = 'queued', error_code = NULL, updated_at = coalesce(%(now)s::timestamptz, now())
FROM notifications n
WHERE n.id = CASE WHEN %(payload)s::jsonb ->> 'notification_id'
                       ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                  THEN (%(payload)s::jsonb ->> 'notification_id')::uuid END
  AND n.tenant_id = %(tenant_id)s
  AND d.recipient_id = n.recipient_id AND d.event_id = n.event_id AND d.tenant_id = n.tenant_id
  AND d.channel = 'push' AND d.status = 'failed'
RETURNING d.id;

-- name: delivery_expire_for_jobs
-- The expiry service made these jobs dead as expired: an email or SMS delivery whose provider
-- job never ran before its time to live is expired (it was never sent).  Only from queued.
UPDATE deliveries d SET status = 'expired', error_code = 'expired',
       updated_at = coalesce(%(now)s::timestamptz, now())
FROM jobs j
WHERE j.id = ANY(%(job_ids)s::uuid[]) AND j.type IN ('email.send', 'sms.send', 'sms.otp')
  AND d.provider_ref = j.payload->>'message_id' AND d.tenant_id = j.tenant_id
  AND d.channel IN ('email', 'sms') AND d.status = 'queued'
RETURNING d.id;

-- name: delivery_settle_dead_jobs
-- The safety net behind the handlers: an email or SMS delivery still queued whose provider job
-- went dead without its handler saying so (the reaper after a crash on the last attempt, a
-- handler timeout on the last attempt) is failed (expired when the job expired), never left
-- waiting.  Dead jobs of the last %(window)s seconds (jobs_dead_finished_idx), from queued only.
UPDATE deliveries d SET status = CASE WHEN j.last_error_code = 'expired' THEN 'expired' ELSE 'failed' END,
       error_code = coalesce(j.last_error_code, 'dead'), updated_at = coalesce(%(now)s::timestamptz, now())
FROM jobs j
WHERE j.status = 'dead'
  AND j.finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND j.type IN ('email.send', 'sms.send', 'sms.otp')
  AND d.provider_ref = j.payload->>'message_id' AND d.tenant_id = j.tenant_id
  AND d.channel IN ('email', 'sms') AND d.status = 'queued'
RETURNING d.id;

-- name: delivery_settle_dead_push_jobs
-- The same safety net for Web Push: a push delivery still queued whose push.send job went dead
-- without its handler saying so (the reaper after a crash on the last attempt) is failed.  Found
-- through the inbox row the job names (its notification_id; a push that is not of an inbox row
-- names none and moves nothing).  A later acceptance by another device of the same recipient
-- still moves it to sent (delivery_push_confirm lets "sent" win over "failed").
UPDATE deliveries d SET status = 'failed', error_code = coalesce(j.last_error_code, 'dead'),
       updated_at = coalesce(%(now)s::timestamptz, now())
FROM jobs j
JOIN notifications n
  ON n.id = CASE WHEN j.payload->>'notification_id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                 THEN (j.payload->>'notification_id')::uuid END
 AND n.tenant_id = j.tenant_id
WHERE j.status = 'dead'
  AND j.finished_at >= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
  AND j.type = 'push.send'
  AND d.recipient_id = n.recipient_id AND d.event_id = n.event_id AND d.tenant_id = j.tenant_id
  AND d.channel = 'push' AND d.status = 'queued'
RETURNING d.id;

-- name: delivery_list_for
-- The deliveries of an event or of one inbox row, per channel (ops view), tenant-scoped; the inbox
-- channel's is the inbox row itself (notification_deliveries, migration 0056).  With the request's
-- correlation id (the deliver job's, else the event's) and the provider jobs each delivery handed
-- over to (issue 43): email/SMS keyed by the delivery, push by its inbox row; jobs_event_idx finds them.
SELECT d.*, u.email AS recipient_email, j.status AS job_status,
       coalesce(j.correlation_id, e.correlation_id) AS correlation_id, pj.provider_jobs
FROM notification_deliveries d
JOIN users u ON u.id = d.recipient_id
LEFT JOIN jobs j ON j.id = d.job_id
LEFT JOIN outbox_events e ON e.id = d.event_id
LEFT JOIN LATERAL (
    SELECT jsonb_agg(jsonb_build_object('id', p.id, 'type', p.type, 'status', p.status,
                                        'correlation_id', p.correlation_id) ORDER BY p.created_at, p.id)
               AS provider_jobs
    FROM jobs p
    WHERE d.channel <> 'inbox' AND p.event_id = d.event_id AND p.tenant_id = d.tenant_id
      AND (p.idempotency_key = 'delivery:' || d.id::text
           OR (d.channel = 'push' AND p.type = 'push.send'
               AND p.payload ->> 'notification_id' = d.notification_id::text))
) pj ON true
WHERE (d.event_id = %(event_id)s::uuid
       OR (d.recipient_id, d.event_id) = (SELECT recipient_id, event_id FROM notifications
                                          WHERE id = %(notification_id)s::uuid))
  AND (%(scope_all)s OR d.tenant_id = ANY(%(scope_ids)s))
ORDER BY u.email, d.channel
LIMIT 500;

-- name: delivery_recent
-- The latest deliveries (ops view), tenant-scoped, optionally of one template key; the inbox rows
-- are the inbox channel's (notification_deliveries).
SELECT d.*, u.email AS recipient_email
FROM notification_deliveries d JOIN users u ON u.id = d.recipient_id
WHERE (%(scope_all)s OR d.tenant_id = ANY(%(scope_ids)s))
  AND (%(template_key)s::text IS NULL OR d.template_key = %(template_key)s)
ORDER BY d.created_at DESC, d.id DESC
LIMIT %(limit)s;

-- name: inbox_page
-- A user's inbox, newest first, before a cursor (keyset: stable under concurrent inserts).
SELECT id, seq, tenant_id, event_id, event_type, category, title, body, data, locale, created_at,
       seen_at, read_at, archived_at
FROM notifications
WHERE recipient_id = %(user_id)s
  AND (%(before)s::bigint IS NULL OR seq < %(before)s)
  AND (%(include_archived)s OR archived_at IS NULL)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: inbox_since
-- A user's rows after a cursor, oldest first (sync and SSE resume).
SELECT id, seq, tenant_id, event_id, event_type, category, title, body, data, locale, created_at,
       seen_at, read_at, archived_at
FROM notifications
WHERE recipient_id = %(user_id)s AND seq > %(since)s
ORDER BY seq
LIMIT %(limit)s;

-- name: inbox_events_since_many
-- Many streams at once (the stream server reads together the streams one wake-up woke): for each
-- (recipient, cursor) pair, its rows after the cursor, oldest first, at most %(limit)s, tagged with the
-- pair's position ``i`` (1-based), each with its stream event's data already as JSON text (the keys
-- and values of opsboard.web.sse.event_data: built here, in C, not 10,000 times in Python).  One index
-- scan per pair (recipient_id, seq), one round trip for all; the arrays come as literals ('{...}').
SELECT p.i, n.seq,
       json_build_object('id', n.id, 'cursor', n.seq, 'event_type', n.event_type, 'category', n.category,
                         'title', n.title, 'body', n.body, 'locale', n.locale,
                         'created_at', to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')
                                       || '+00:00',
                         'read', n.read_at IS NOT NULL, 'link', n.data ->> 'link')::text AS data
FROM unnest(%(user_ids)s::uuid[], %(cursors)s::bigint[]) WITH ORDINALITY AS p(user_id, since, i)
CROSS JOIN LATERAL (
    SELECT id, seq, event_type, category, title, body, locale, created_at, read_at, data
    FROM notifications
    WHERE recipient_id = p.user_id AND seq > p.since
    ORDER BY seq
    LIMIT %(limit)s
) AS n
ORDER BY p.i, n.seq;

-- name: inbox_latest_seq
-- The newest cursor of a user's inbox (0 when empty).
SELECT coalesce(max(seq), 0) AS seq FROM notifications WHERE recipient_id = %(user_id)s;

-- name: inbox_unread_count
-- Unread, unarchived rows of a user.
SELECT count(*) AS unread FROM notifications
WHERE recipient_id = %(user_id)s AND read_at IS NULL AND archived_at IS NULL;

-- name: inbox_get
-- One row of a user's inbox, with its full text and the delivery state of each channel it went to
-- (channel -> status: what the user may know of their own notification; never another user's).
-- The row is its inbox delivery, delivered (migration 0056; an older row's own 'inbox' deliveries row
-- says the same).
SELECT n.id, n.seq, n.tenant_id, n.event_id, n.event_type, n.category, n.template_key, n.template_version,
       n.title, n.body, n.data, n.locale, n.created_at, n.seen_at, n.read_at, n.archived_at,
       '{"inbox": "delivered"}'::jsonb
       || (SELECT coalesce(jsonb_object_agg(d.channel, d.status), '{}'::jsonb) FROM deliveries d
           WHERE d.event_id = n.event_id AND d.recipient_id = n.recipient_id) AS deliveries
FROM notifications n WHERE n.id = %(id)s AND n.recipient_id = %(user_id)s;

-- name: inbox_mark
-- Mark a row seen / read / archived (read implies seen); the first time is kept.
UPDATE notifications SET
    seen_at = CASE WHEN %(state)s IN ('seen', 'read') THEN coalesce(seen_at, coalesce(%(now)s::timestamptz, now()))
                   ELSE seen_at END,
    read_at = CASE WHEN %(state)s = 'read' THEN coalesce(read_at, coalesce(%(now)s::timestamptz, now()))
                   ELSE read_at END,
    archived_at = CASE WHEN %(state)s = 'archived' THEN coalesce(archived_at, coalesce(%(now)s::timestamptz, now()))
                       ELSE archived_at END
WHERE id = %(id)s AND recipient_id = %(user_id)s
RETURNING id, seq, seen_at, read_at, archived_at;

-- name: user_token_insert
-- Store an end user's bearer token (hash only).
INSERT INTO user_tokens (id, user_id, name, prefix, token_hash)
VALUES (%(id)s, %(user_id)s, %(name)s, %(prefix)s, %(token_hash)s)
RETURNING id, user_id, name, prefix, created_at;

-- name: user_token_verify
-- The live token's user (an active user) and whether they hold an active membership: callers refuse
-- (403) a user whose every membership was deactivated.
UPDATE user_tokens t SET last_used_at = now()
FROM users u
WHERE t.token_hash = %(token_hash)s AND t.revoked_at IS NULL AND u.id = t.user_id AND u.is_active
RETURNING t.id, t.user_id, u.email,
          EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.active) AS active_member;

-- name: template_live_for_key
-- The live (highest published) version of each channel x locale of a key in one scope: a tenant's own
-- versions (%(tenant_id)s) or the platform's (%(tenant_id)s NULL).
SELECT DISTINCT ON (channel, locale) *
FROM notification_templates
WHERE key = %(key)s AND status = 'published' AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid
ORDER BY channel, locale, version DESC;

-- name: template_live_layers
-- What a tenant's notification can be rendered from: the live version of each channel x locale of
-- the tenant's own versions and of the platform's, in one read (the deliver job's and the fan-out's);
-- the caller picks the tenant's first (render.Layers).  The two partial unique indexes answer it.
SELECT DISTINCT ON (tenant_id, channel, locale) *
FROM notification_templates
WHERE key = %(key)s AND status = 'published' AND (tenant_id IS NULL OR tenant_id = %(tenant_id)s::uuid)
ORDER BY tenant_id, channel, locale, version DESC;

-- name: template_keys
-- Every template key a scope sees, with its channels and locales: the scope's own versions (live
-- version, draft) and, for a tenant (%(tenant_id)s not NULL), the platform's published ones it
-- inherits (inherited_version).  A tenant never sees the platform's drafts or another tenant's rows.
SELECT key, array_agg(DISTINCT channel ORDER BY channel) AS channels,
       array_agg(DISTINCT locale ORDER BY locale) AS locales,
       max(version) FILTER (WHERE status = 'published' AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid)
           AS live_version,
       max(version) FILTER (WHERE status = 'published' AND tenant_id IS NULL AND %(tenant_id)s::uuid IS NOT NULL)
           AS inherited_version,
       coalesce(bool_or(status = 'draft' AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid), false)
           AS has_draft,
       max(updated_at) AS updated_at
FROM notification_templates
WHERE tenant_id = %(tenant_id)s::uuid OR (tenant_id IS NULL AND (%(tenant_id)s::uuid IS NULL OR status = 'published'))
GROUP BY key ORDER BY key;

-- name: template_versions
-- Every version of a key in one scope (newest first): a tenant's own, or the platform's.
SELECT * FROM notification_templates
WHERE key = %(key)s AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid
ORDER BY channel, locale, version DESC;

-- name: template_get
-- One version by id (the caller checks its tenant against the actor's scope).
SELECT * FROM notification_templates WHERE id = %(id)s;

-- name: template_get_for_update
-- One version by id, locked: publish and roll back act on what they checked.
SELECT * FROM notification_templates WHERE id = %(id)s FOR UPDATE;

-- name: template_draft_get
-- The draft of a key x channel x locale in one scope, if any.
SELECT * FROM notification_templates
WHERE key = %(key)s AND channel = %(channel)s AND locale = %(locale)s AND status = 'draft'
  AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid;

-- name: template_next_version
-- The next version number of a key x channel x locale in one scope (each scope numbers its own).
SELECT coalesce(max(version), 0) + 1 AS version FROM notification_templates
WHERE key = %(key)s AND channel = %(channel)s AND locale = %(locale)s
  AND tenant_id IS NOT DISTINCT FROM %(tenant_id)s::uuid;

-- name: template_insert
-- A new version (draft or, for seeds and rollbacks, published) in a scope (%(tenant_id)s NULL: the platform).
INSERT INTO notification_templates (id, tenant_id, key, channel, locale, version, subject, body, variables, sample,
                                    status, author_label, published_at, rolled_back_from)
VALUES (%(id)s, %(tenant_id)s, %(key)s, %(channel)s, %(locale)s, %(version)s, %(subject)s, %(body)s, %(variables)s,
        %(sample)s, %(status)s, %(author_label)s,
        CASE WHEN %(status)s = 'published' THEN coalesce(%(now)s::timestamptz, now()) END, %(rolled_back_from)s)
RETURNING *;

-- name: template_draft_update
-- Edit a draft in place (a published version refuses: trigger).
UPDATE notification_templates SET subject = %(subject)s, body = %(body)s, variables = %(variables)s,
       sample = %(sample)s, updated_at = now()
WHERE id = %(id)s
RETURNING *;

-- name: template_publish
-- Freeze a draft as published.
UPDATE notification_templates SET status = 'published', published_at = coalesce(%(now)s::timestamptz, now()),
       updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND status = 'draft'
RETURNING *;

-- name: template_shipped_missing
-- Which of the shipped (key, channel, locale) triples have no platform version at all (draft or
-- published): only those are seeded, so an author's versions are never overwritten.  One statement for
-- all of them: the web and the worker ask at every start.  A tenant's own versions do not count: the
-- shipped text is the platform's.
SELECT s.key, s.channel, s.locale
FROM unnest(%(keys)s::text[], %(channels)s::text[], %(locales)s::text[]) AS s(key, channel, locale)
WHERE NOT EXISTS (SELECT 1 FROM notification_templates t
                  WHERE t.key = s.key AND t.channel = s.channel AND t.locale = s.locale AND t.tenant_id IS NULL);

-- name: template_shipped_stale
-- Which shipped triples the product published and nobody touched since, whose live platform version is
-- an older shipped text (a release changed its words: issue 43's alert texts): every platform version of
-- the triple was seeded ('seed', published; no draft, no author's version, no rollback) and the highest
-- one's subject or body differs from the shipped text.  Those get the shipped text as their next version;
-- a triple an author ever touched is left alone.
SELECT s.key, s.channel, s.locale
FROM unnest(%(keys)s::text[], %(channels)s::text[], %(locales)s::text[], %(subjects)s::text[], %(bodies)s::text[])
     AS s(key, channel, locale, subject, body)
WHERE NOT EXISTS (SELECT 1 FROM notification_templates t
                  WHERE t.key = s.key AND t.channel = s.channel AND t.locale = s.locale AND t.tenant_id IS NULL
                    AND (t.author_label <> 'seed' OR t.status <> 'published'))
  AND EXISTS (SELECT 1 FROM (SELECT t.subject, t.body FROM notification_templates t
                             WHERE t.key = s.key AND t.channel = s.channel AND t.locale = s.locale
                               AND t.tenant_id IS NULL
                             ORDER BY t.version DESC LIMIT 1) live
              WHERE live.subject IS DISTINCT FROM s.subject OR live.body IS DISTINCT FROM s.body);

-- name: template_seed_lock
-- Serializes seeding the shipped templates: processes starting together seed each missing one once.
SELECT pg_advisory_xact_lock(hashtextextended('opsboard.template_seed', 0));

-- name: template_usage
-- How many deliveries used each version of a key, per scope (the inbox's: its rows,
-- notifications_template_idx).  A tenant (%(tenant_id)s): its own deliveries, the version of each
-- split by whose it was (own: the tenant's, else the platform's or the shipped text).  The platform
-- (%(tenant_id)s NULL): every tenant's deliveries that used a platform version.
SELECT channel, locale, template_version, coalesce(template_own, false) AS own, count(*) AS deliveries
FROM notification_deliveries
WHERE template_key = %(key)s
  AND CASE WHEN %(tenant_id)s::uuid IS NULL THEN template_own IS NOT TRUE ELSE tenant_id = %(tenant_id)s::uuid END
GROUP BY channel, locale, template_version, coalesce(template_own, false)
ORDER BY channel, locale, coalesce(template_own, false) DESC, template_version DESC;

-- name: inbox_notify
-- Wake SSE streams: one NOTIFY per key (a recipient id, or '*'), delivered at commit.
SELECT pg_notify(%(channel)s, k) FROM unnest(%(keys)s::text[]) AS k;


-- name: delivery_cancel_unsent
-- These notifications.deliver(_critical) jobs were cancelled before they ran (jobtypes' on_cancel,
-- in the cancel's transaction): each delivery (the job's id is the delivery's) still queued and not
-- yet handed to a provider job is failed, error 'cancelled'.  One already handed over waits on its
-- provider job, which records its own answer.
UPDATE deliveries d SET status = 'failed', error_code = 'cancelled', updated_at = coalesce(%(now)s::timestamptz, now())
FROM jobs j
WHERE j.id = ANY(%(job_ids)s::uuid[]) AND j.status = 'cancelled'
  AND d.id = j.id AND d.tenant_id = j.tenant_id AND d.status = 'queued' AND d.provider_ref IS NULL
RETURNING d.id;

-- name: delivery_push_cancel
-- These push.send jobs were cancelled before they ran (jobtypes' on_cancel): the push delivery of
-- each one's inbox row, still queued, is failed (error 'cancelled'), as delivery_settle_dead_push_jobs
-- does for a dead one; another device's push of the same row accepted later still moves it to sent
-- (delivery_push_confirm lets "sent" win over "failed").
UPDATE deliveries d SET status = 'failed', error_code = 'cancelled', updated_at = coalesce(%(now)s::timestamptz, now())
FROM jobs j
JOIN notifications n
  ON n.id = CASE WHEN j.payload->>'notification_id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                 THEN (j.payload->>'notification_id')::uuid END
 AND n.tenant_id = j.tenant_id
WHERE j.id = ANY(%(job_ids)s::uuid[]) AND j.status = 'cancelled' AND j.type = 'push.send'
  AND d.recipient_id = n.recipient_id AND d.event_id = n.event_id AND d.tenant_id = j.tenant_id
  AND d.channel = 'push' AND d.status = 'queued'
RETURNING d.id;

-- name: notification_channel_upsert
-- The active catalogue's channels (opsboard.channels.sync, at every web and worker start and at
-- opsboard migrate): a row each, so the channel foreign keys (migration 0068) accept them.  %(states)s
-- holds each channel's states comma-separated.  A row already equal is not rewritten (no new row
-- version at every start); rows of channels no longer registered stay (their deliveries keep them).
INSERT INTO notification_channels AS c (name, label, states, registered_by, updated_at)
SELECT x.name, x.label, string_to_array(x.states, ','), x.registered_by, now()
FROM unnest(%(names)s::text[], %(labels)s::text[], %(states)s::text[], %(registered_by)s::text[])
     AS x(name, label, states, registered_by)
ON CONFLICT (name) DO UPDATE SET label = EXCLUDED.label, states = EXCLUDED.states,
                                 registered_by = EXCLUDED.registered_by, updated_at = now()
WHERE (c.label, c.states, c.registered_by) IS DISTINCT FROM (EXCLUDED.label, EXCLUDED.states, EXCLUDED.registered_by)
RETURNING c.name;
