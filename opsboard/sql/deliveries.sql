-- name: webhook_endpoint_insert
-- Register a tenant's webhook endpoint.
INSERT INTO webhook_endpoints (id, tenant_id, url, secrets, event_types, description)
VALUES (%(id)s, %(tenant_id)s, %(url)s, %(secrets)s, %(event_types)s, %(description)s)
RETURNING *;

-- name: webhook_endpoint_get
-- One endpoint of a tenant.
SELECT * FROM webhook_endpoints WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: webhook_endpoint_rotate
-- Add a new current secret; the ones still signing keep signing beside it for
-- %(overlap_seconds)s (then only the new one signs), at most %(keep)s in all.
-- Secrets whose window had already closed are dropped; no overlap keeps none.
UPDATE webhook_endpoints
SET secrets = CASE WHEN %(overlap_seconds)s::float8 <= 0 THEN ARRAY[%(secret)s::text]
                   ELSE (ARRAY[%(secret)s::text]
                         || CASE WHEN previous_secrets_until <= coalesce(%(now)s::timestamptz, now())
                                 THEN secrets[1:1] ELSE secrets END)[1:%(keep)s] END,
    previous_secrets_until = CASE WHEN %(overlap_seconds)s::float8 <= 0 THEN NULL
                                  ELSE coalesce(%(now)s::timestamptz, now())
                                       + make_interval(secs => %(overlap_seconds)s::float8) END
WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: webhook_endpoint_disable
-- Disable an endpoint with a reason; returns the row only when it was enabled.
UPDATE webhook_endpoints
SET enabled = false, disabled_reason = %(reason)s, disabled_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND enabled
RETURNING *;

-- name: webhook_endpoint_enable
-- Enable an endpoint again (after its owner fixed it).
UPDATE webhook_endpoints SET enabled = true, disabled_reason = NULL, disabled_at = NULL
WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: webhook_endpoint_subscribed
-- The fan-out's targets: the tenant's enabled endpoints that take this event type.
SELECT id FROM webhook_endpoints
WHERE tenant_id = %(tenant_id)s AND enabled
  AND (event_types @> ARRAY[%(type)s::text] OR event_types @> ARRAY['*'])
ORDER BY id;

-- name: webhook_fanout_targets
-- The fan-out of a claimed batch of events at once (webhooks.fanout_many): each
-- event's tenant's enabled endpoints that take its type, and whether a
-- webhook.deliver job already holds the pair's key, dead ones included (two
-- NOT EXISTS, each matching one partial index: jobs_idempotency_idx for live
-- jobs, jobs_dead_key_idx for dead ones).  An event that is gone has no row.
SELECT e.id AS event_id, e.tenant_id, ep.id AS endpoint_id, k.key,
       EXISTS (SELECT 1 FROM jobs j WHERE j.tenant_id = e.tenant_id AND j.type = 'webhook.deliver'
                 AND j.idempotency_key = k.key AND j.idempotency_key IS NOT NULL AND j.status <> 'dead')
       OR EXISTS (SELECT 1 FROM jobs j WHERE j.tenant_id = e.tenant_id AND j.type = 'webhook.deliver'
                    AND j.idempotency_key = k.key AND j.idempotency_key IS NOT NULL AND j.status = 'dead') AS held
FROM outbox_events e
JOIN webhook_endpoints ep ON ep.tenant_id = e.tenant_id AND ep.enabled
     AND (ep.event_types @> ARRAY[e.type] OR ep.event_types @> ARRAY['*'])
CROSS JOIN LATERAL (SELECT e.id::text || ':' || ep.id::text AS key) k
WHERE e.id = ANY(%(event_ids)s::uuid[])
ORDER BY e.id, ep.id;

-- name: webhook_event_get
-- The outbox event a webhook carries (read by the delivery side only).
SELECT id, type, version, tenant_id, occurred_at, payload FROM outbox_events WHERE id = %(id)s;

-- name: webhook_endpoint_list
-- Endpoints in a scope, with their breaker, for the dashboard.
SELECT e.id, e.tenant_id, t.slug AS tenant, e.url, e.event_types, e.enabled, e.disabled_reason, e.disabled_at,
       e.description, e.created_at,
       cardinality(e.secrets) AS secret_count, e.previous_secrets_until, b.state AS breaker_state,
       b.consecutive_failures,
       b.open_until, b.failing_since, b.last_success_at, b.last_failure_at, b.last_error_code
FROM webhook_endpoints e
JOIN tenants t ON t.id = e.tenant_id
LEFT JOIN circuit_breakers b ON b.name = 'endpoint:' || e.id::text
WHERE (%(scope_all)s OR e.tenant_id = ANY(%(scope_ids)s::uuid[]))
  AND (%(id)s::uuid IS NULL OR e.id = %(id)s::uuid)
ORDER BY e.enabled, b.state NULLS LAST, e.created_at DESC
LIMIT %(limit)s;

-- name: breaker_get
-- A breaker's state (no row: closed, never failed).
SELECT * FROM circuit_breakers WHERE name = %(name)s;

-- name: breaker_list
-- Provider breakers and open endpoint breakers, for the dashboard.
SELECT name, tenant_id, state, consecutive_failures, window_calls, window_failures, opened_at, open_until,
       failing_since, last_success_at, last_failure_at, last_error_code, updated_at
FROM circuit_breakers
WHERE (tenant_id IS NULL AND %(scope_all)s) OR tenant_id = ANY(%(scope_ids)s::uuid[])
   OR (%(scope_all)s AND state <> 'closed')
ORDER BY state = 'closed', name
LIMIT %(limit)s;

-- name: breaker_take_probe
-- An open breaker whose cool-down passed (or a half-open one whose probe's
-- lease ran out) lets exactly one caller through as the probe.  The UPDATE's
-- row lock makes the choice atomic across workers: the others see no row.
UPDATE circuit_breakers
SET state = 'half_open', probe_until = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(probe_lease)s),
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s
  AND ((state = 'open' AND open_until <= coalesce(%(now)s::timestamptz, now()))
       OR (state = 'half_open' AND probe_until <= coalesce(%(now)s::timestamptz, now())))
RETURNING *;

-- name: breaker_success
-- A call succeeded: the breaker closes and its failure run ends.  Written only
-- when something changes (a closed, healthy breaker is not rewritten per call).
UPDATE circuit_breakers
SET state = 'closed', consecutive_failures = 0, opens = 0, open_until = NULL, probe_until = NULL,
    failing_since = NULL, last_success_at = coalesce(%(now)s::timestamptz, now()),
    window_calls = CASE WHEN window_started_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
                        THEN 1 ELSE window_calls + 1 END,
    window_failures = CASE WHEN window_started_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
                           THEN 0 ELSE window_failures END,
    window_started_at = CASE WHEN window_started_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)
                             THEN coalesce(%(now)s::timestamptz, now()) ELSE window_started_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s AND (state <> 'closed' OR consecutive_failures > 0 OR window_failures > 0)
RETURNING *;

-- name: breaker_ensure
-- The row a failure is counted on (a breaker that never failed has none).
INSERT INTO circuit_breakers (name, tenant_id, window_started_at, updated_at)
VALUES (%(name)s, %(tenant_id)s, coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO NOTHING;

-- name: breaker_failure
-- A call failed (a retryable failure: timeout, 5xx, 429, reset).  Counts it
-- and, in the same statement, opens the breaker when the consecutive failures
-- reach the threshold, the window's failure rate does (with enough calls), or
-- a half-open probe failed -- unless it is already open.  Each opening in one
-- failure run doubles the cool-down, up to the cap.  Deciding and opening in
-- one statement is what makes a burst open it once: ``cur`` locks the row
-- (FOR UPDATE waits for a concurrent failure and then reads the row it left),
-- so the second of two workers failing at once sees the breaker already open.
-- ``opened`` says whether this call opened it.
WITH cur AS (
    SELECT b.*, n.t, b.window_started_at < n.t - make_interval(secs => %(window)s) AS reset
    FROM circuit_breakers b, (SELECT coalesce(%(now)s::timestamptz, now()) AS t) n
    WHERE b.name = %(name)s
    FOR UPDATE OF b
), counted AS (
    SELECT name, t, state, opens, open_until, reset, consecutive_failures + 1 AS consecutive,
           CASE WHEN reset THEN 1 ELSE window_calls + 1 END AS calls,
           CASE WHEN reset THEN 1 ELSE window_failures + 1 END AS failures
    FROM cur
), decided AS (
    SELECT c.*,
           NOT (c.state = 'open' AND c.open_until > c.t)
           AND (c.state = 'half_open' OR c.consecutive >= %(threshold)s
                OR (c.calls >= %(min_calls)s AND c.failures::float8 / c.calls >= %(rate)s)) AS trip
    FROM counted c
)
UPDATE circuit_breakers b
SET consecutive_failures = d.consecutive,
    window_calls = d.calls,
    window_failures = d.failures,
    window_started_at = CASE WHEN d.reset THEN d.t ELSE b.window_started_at END,
    failing_since = coalesce(b.failing_since, d.t),
    last_failure_at = d.t,
    last_error_code = %(code)s,
    state = CASE WHEN d.trip THEN 'open' ELSE d.state END,
    opens = CASE WHEN d.trip THEN d.opens + 1 ELSE d.opens END,
    opened_at = CASE WHEN d.trip THEN d.t ELSE b.opened_at END,
    open_until = CASE WHEN d.trip
                      THEN d.t + make_interval(secs => least(%(cooldown_max)s::float8,
                                                             %(cooldown)s::float8 * power(2, least(d.opens, 20))))
                      ELSE d.open_until END,
    probe_until = CASE WHEN d.trip THEN NULL ELSE b.probe_until END,
    updated_at = d.t
FROM decided d
WHERE b.name = d.name
RETURNING b.*, d.trip AS opened;

-- name: outbound_message_insert
-- Record an email or SMS to send (its job carries only the id).
INSERT INTO outbound_messages (id, tenant_id, channel, recipient, template, template_version, params)
VALUES (%(id)s, %(tenant_id)s, %(channel)s, %(recipient)s, %(template)s, %(template_version)s, %(params)s)
RETURNING id, tenant_id, channel, template, template_version, status, created_at;

-- name: outbound_message_get
-- One message of a tenant, for its handler.
SELECT * FROM outbound_messages WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: outbound_message_sent
-- The provider accepted the message: keep its reference; a one-time code is
-- erased from the parameters once it was handed over.  A notification delivery that
-- handed this message moves queued -> sent in the same statement (never back from a
-- later state: a bounce report may have come first).
WITH m AS (
    UPDATE outbound_messages
    SET status = 'sent', provider_ref = %(ref)s, sent_at = coalesce(%(now)s::timestamptz, now()),
        params = CASE WHEN %(erase)s THEN '{}'::jsonb ELSE params END
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s
    RETURNING id, tenant_id, channel
), d AS (
    UPDATE deliveries d SET status = 'sent', updated_at = coalesce(%(now)s::timestamptz, now())
    FROM m
    WHERE d.provider_ref = m.id::text AND d.tenant_id = m.tenant_id AND d.channel = m.channel
      AND d.status = 'queued'
    RETURNING d.id
)
SELECT id FROM m;

-- name: outbound_message_failed
-- The provider refused the message for good (a permanent answer, or its retries are
-- exhausted): the message and the notification delivery that handed it are failed, in one
-- statement.  The delivery moves from queued or sent, never from a final state.
WITH m AS (
    UPDATE outbound_messages SET status = 'failed'
    WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status <> 'failed'
    RETURNING id, tenant_id, channel
), d AS (
    UPDATE deliveries d SET status = 'failed', error_code = %(error_code)s,
           updated_at = coalesce(%(now)s::timestamptz, now())
    FROM m
    WHERE d.provider_ref = m.id::text AND d.tenant_id = m.tenant_id AND d.channel = m.channel
      AND d.status IN ('queued', 'sent')
    RETURNING d.id
)
SELECT id FROM m;

-- name: outbound_message_reopen
-- An operator replays a dead email.send / sms.send / sms.otp job (jobtypes' on_replay, in the
-- replay's transaction; %(payload)s is the dead job's): its message, failed by that job, goes
-- back to queued, and so does the notification delivery that handed it (failed, or expired when
-- the job ran out of time), so the replay's answer (sent, or failed again) is the one recorded.
-- Nothing else moves: a message sent, or a delivery past sent (delivered, bounced), stays.
WITH m AS (
    UPDATE outbound_messages SET status = 'queued'
    WHERE id = (%(payload)s::jsonb ->> 'message_id')::uuid AND tenant_id = %(tenant_id)s AND status = 'failed'
    RETURNING id, tenant_id, channel
), d AS (
    UPDATE deliveries d SET status = 'queued', error_code = NULL, updated_at = coalesce(%(now)s::timestamptz, now())
    FROM outbound_messages o
    WHERE o.id = (%(payload)s::jsonb ->> 'message_id')::uuid AND o.tenant_id = %(tenant_id)s
      AND d.provider_ref = o.id::text AND d.tenant_id = o.tenant_id AND d.channel = o.channel
      AND d.status IN ('failed', 'expired')
    RETURNING d.id
)
SELECT id FROM m UNION ALL SELECT id FROM d;

-- name: push_subscription_upsert
-- Store a browser's subscription; the same endpoint again replaces its keys and revives it.  Only its
-- owner's (or, once the owner revoked it, anyone's): another user's endpoint returns no row (refused).
INSERT INTO push_subscriptions (id, tenant_id, user_ref, endpoint, p256dh, auth)
VALUES (%(id)s, %(tenant_id)s, %(user_ref)s, %(endpoint)s, %(p256dh)s, %(auth)s)
ON CONFLICT (tenant_id, endpoint) DO UPDATE
SET p256dh = excluded.p256dh, auth = excluded.auth, user_ref = excluded.user_ref, state = 'active',
    invalid_reason = NULL
WHERE push_subscriptions.user_ref IS NOT DISTINCT FROM excluded.user_ref OR push_subscriptions.state = 'revoked'
RETURNING *;

-- name: push_subscription_get
-- One subscription of a tenant.
SELECT * FROM push_subscriptions WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: push_subscription_invalidate
-- The push service said the subscription is gone (404/410): never used again.
UPDATE push_subscriptions SET state = 'invalid', invalid_reason = %(reason)s
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND state = 'active'
RETURNING id;

-- name: push_subscription_success
-- A push was accepted.
UPDATE push_subscriptions SET last_success_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: webhook_delivery_load
-- Everything one delivery needs, in one round trip: the endpoint (tenant-scoped),
-- the event, and the endpoint breaker's state (NULL: no row, closed and healthy).
-- secrets: the ones that sign now (after a rotation's overlap window, only the newest).
SELECT e.id, e.url,
       CASE WHEN e.previous_secrets_until <= now() THEN e.secrets[1:1] ELSE e.secrets END AS secrets,
       e.enabled, ev.id AS event_id, ev.type AS event_type, ev.tenant_id AS event_tenant_id,
       ev.occurred_at, ev.payload, b.state AS breaker_state
FROM webhook_endpoints e
LEFT JOIN outbox_events ev ON ev.id = %(event_id)s
LEFT JOIN circuit_breakers b ON b.name = 'endpoint:' || e.id::text
WHERE e.id = %(endpoint_id)s AND e.tenant_id = %(tenant_id)s;

-- name: push_subscription_revoke
-- Its owner unsubscribed (or signed out): never used again.
UPDATE push_subscriptions SET state = 'revoked'
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND state = 'active'
RETURNING id;

-- name: webhook_endpoint_get_scoped
-- One endpoint in a caller's tenant scope, locked for an operator action.
SELECT * FROM webhook_endpoints
WHERE id = %(id)s AND (%(scope_all)s OR tenant_id = ANY(%(scope_ids)s::uuid[]))
FOR UPDATE;

-- name: webhook_endpoint_delete
-- Remove an endpoint (its queued deliveries end endpoint_gone) and its breaker.
WITH gone AS (
    DELETE FROM webhook_endpoints WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING *
), b AS (
    DELETE FROM circuit_breakers WHERE name = 'endpoint:' || %(id)s::text AND EXISTS (SELECT 1 FROM gone)
)
SELECT * FROM gone;

-- name: webhook_endpoint_breaker_reset
-- Forget an endpoint's breaker (enabled again by its owner: start from closed).
DELETE FROM circuit_breakers WHERE name = 'endpoint:' || %(id)s::text;

-- name: webhook_deliveries_begin
-- A claimed batch of deliveries in one statement (one round trip, one commit):
-- for each job this worker still holds (the check of effect_begin_held, job
-- rows share-locked), the endpoint (tenant-scoped), the event and the endpoint
-- breaker's state as webhook_delivery_load, and, when the delivery will be
-- attempted (endpoint enabled, event of the job's tenant, breaker closed or
-- absent), its effect recorded as started (or adopted when an earlier attempt
-- started it) as effect_begin_held does.  Committed before any request goes
-- out.  The caller passes only the job ids and the attempts it holds them at:
-- tenant, endpoint and event come from the job rows (a payload id that is not
-- a uuid fails the statement), and a second job of the
-- same effect key in the batch is left out (the first one in the batch's order
-- is begun).  Rows come back only for held jobs whose endpoint exists;
-- effect_state is NULL when no effect was begun; wait_until is set when the
-- endpoint's breaker admits no call now.  The event's payload comes back as
-- text: the caller builds each event's body once (not once per job).
WITH input AS (
    SELECT * FROM unnest(%(job_ids)s::uuid[], %(attempts)s::int[]) WITH ORDINALITY AS i(job_id, attempt, ord)
), locked AS (
    SELECT i.job_id, i.attempt, i.ord, j.tenant_id, j.payload->>'endpoint_id' AS endpoint_text,
           j.payload->>'event_id' AS event_text
    FROM input i JOIN jobs j ON j.id = i.job_id
    WHERE j.locked_by = %(worker)s AND j.attempts = i.attempt  -- running: locked_by is set (see job_still_held)
      AND j.locked_until > coalesce(%(now)s::timestamptz, now())
    FOR SHARE OF j
), held AS (
    -- The payload's ids are cast as they are (a regular-expression check cost as much server CPU as
    -- the rest of the statement): a batch with one that is not a uuid fails as a whole and the
    -- caller sends it again without that job (see webhook_prepare).
    SELECT DISTINCT ON (k.key) l.job_id, l.attempt, l.tenant_id, i.endpoint_id, i.event_id, k.key
    FROM locked l,
         LATERAL (SELECT l.endpoint_text::uuid AS endpoint_id, l.event_text::uuid AS event_id) i,
         LATERAL (SELECT 'webhook:' || i.event_id::text || ':' || i.endpoint_id::text AS key) k
    ORDER BY k.key, l.ord
), loaded AS (
    SELECT h.job_id, h.attempt, h.tenant_id, h.key, e.id, e.url,
           CASE WHEN e.previous_secrets_until <= coalesce(%(now)s::timestamptz, now()) THEN e.secrets[1:1]
                ELSE e.secrets END AS secrets,   -- those that sign now (see webhook_delivery_load)
           e.enabled, ev.id AS event_id,
           ev.type AS event_type, ev.tenant_id AS event_tenant_id, ev.occurred_at, ev.payload,
           b.state AS breaker_state,
           (e.enabled AND ev.tenant_id = h.tenant_id AND coalesce(b.state, 'closed') = 'closed') AS attempt_it,
           -- While the breaker lets no call through (breaker.admit would say so: open and
           -- cooling down, or half-open with its probe out), when to come back: the job
           -- snoozes without the admit round trips.  Past it, admit picks the probe.
           CASE WHEN e.enabled AND ev.tenant_id = h.tenant_id THEN
                CASE WHEN b.state = 'open' AND b.open_until > coalesce(%(now)s::timestamptz, now()) THEN b.open_until
                     WHEN b.state = 'half_open' AND b.probe_until > coalesce(%(now)s::timestamptz, now())
                          THEN b.probe_until END
           END AS wait_until
    FROM held h
    JOIN webhook_endpoints e ON e.id = h.endpoint_id AND e.tenant_id = h.tenant_id
    LEFT JOIN outbox_events ev ON ev.id = h.event_id
    LEFT JOIN circuit_breakers b ON b.name = 'endpoint:' || e.id::text
), up AS (
    INSERT INTO effects (key, job_id, tenant_id, provider, attempt)
    SELECT l.key, l.job_id, l.tenant_id, 'webhooks', l.attempt FROM loaded l WHERE l.attempt_it
    ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, attempt = excluded.attempt
        WHERE effects.state = 'started' AND effects.tenant_id = excluded.tenant_id
    RETURNING key, state, provider_ref, (xmax = 0) AS created
)
SELECT l.job_id, l.id, l.url, l.secrets, l.event_id, l.event_type, l.occurred_at, l.payload::text AS payload_text,
       l.breaker_state, l.attempt_it, l.wait_until,
       coalesce(up.state, ex.state) AS effect_state, coalesce(up.provider_ref, ex.provider_ref) AS provider_ref,
       coalesce(up.created, false) AS effect_created
FROM loaded l
LEFT JOIN up ON up.key = l.key
LEFT JOIN effects ex ON l.attempt_it AND up.key IS NULL AND ex.key = l.key AND ex.tenant_id = l.tenant_id;

-- name: user_push_subscriptions
-- A user's active Web Push subscriptions in a tenant.
SELECT id, endpoint, state, created_at FROM push_subscriptions
WHERE tenant_id = %(tenant_id)s AND user_ref = %(user_ref)s AND state = 'active'
ORDER BY created_at;

-- name: user_push_subscription_revoke
-- The user unregisters a device: revoked, never used again.
UPDATE push_subscriptions SET state = 'revoked'
WHERE id = %(id)s AND user_ref = %(user_ref)s AND state = 'active'
RETURNING id, state;

-- name: outbound_message_cancel
-- These email.send / sms.send / sms.otp jobs were cancelled before they ran (jobtypes' on_cancel, in
-- the cancel's transaction): their messages will never be sent.  Each message still queued is
-- failed, and so is the notification delivery that handed it (error 'cancelled'); a message sent,
-- or a delivery past queued, stays.  Ids that are not uuids name no message and move nothing.
WITH j AS (
    SELECT (payload ->> 'message_id')::uuid AS message_id, tenant_id FROM jobs
    WHERE id = ANY(%(job_ids)s::uuid[]) AND status = 'cancelled'
      AND payload ->> 'message_id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
), m AS (
    UPDATE outbound_messages o SET status = 'failed'
    FROM j WHERE o.id = j.message_id AND o.tenant_id = j.tenant_id AND o.status = 'queued'
    RETURNING o.id
), d AS (
    UPDATE deliveries d SET status = 'failed', error_code = 'cancelled',
           updated_at = coalesce(%(now)s::timestamptz, now())
    FROM j JOIN outbound_messages o ON o.id = j.message_id AND o.tenant_id = j.tenant_id
    WHERE d.provider_ref = o.id::text AND d.tenant_id = o.tenant_id AND d.channel = o.channel
      AND d.status = 'queued'
    RETURNING d.id
)
SELECT id FROM m UNION ALL SELECT id FROM d;

-- name: webhook_endpoint_health
-- One webhook endpoint's page (issue 44): how its deliveries fare.  An endpoint is
-- named in its deliveries' payload; 0083 indexes that name.
-- The newest %(window)s deliveries to one endpoint (jobs_webhook_endpoint_idx)
-- and their attempts (job_attempts_job_idx): calls and failures finished
-- since %(since)s, and how many deliveries were read.  A failure is an attempt
-- that did not succeed (retryable, dead or lease_expired); snoozed and released
-- attempts never reached the endpoint and are not counted either way.
WITH recent AS (
    SELECT id FROM jobs
    WHERE tenant_id = %(tenant_id)s AND type = 'webhook.deliver' AND payload->>'endpoint_id' = %(endpoint_id)s
    ORDER BY id DESC
    LIMIT %(window)s
)
SELECT (SELECT count(*) FROM recent) AS deliveries_read,
       count(a.*) FILTER (WHERE a.outcome IN ('succeeded', 'retryable', 'dead', 'lease_expired')) AS calls,
       count(a.*) FILTER (WHERE a.outcome IN ('retryable', 'dead', 'lease_expired')) AS failures
FROM recent r
JOIN job_attempts a ON a.job_id = r.id
WHERE a.finished_at >= %(since)s;

-- name: webhook_endpoint_last_error
-- The newest failed attempt among the endpoint's newest %(window)s deliveries:
-- its code, its redacted detail (the status and the start of the answer), when.
-- Each delivery's newest failure is looked up by its job (LATERAL ... LIMIT 1, on
-- job_attempts_job_idx): a plain join was planned as a walk of every failed attempt
-- by time (job_attempts_failed_idx) filtered against the deliveries, 32 s at 50
-- endpoints of 2,000 deliveries each against 0.1 s this way.
WITH recent AS (
    SELECT id FROM jobs
    WHERE tenant_id = %(tenant_id)s AND type = 'webhook.deliver' AND payload->>'endpoint_id' = %(endpoint_id)s
    ORDER BY id DESC
    LIMIT %(window)s
)
SELECT a.job_id, a.attempt, a.error_code, a.detail, a.finished_at
FROM recent r
CROSS JOIN LATERAL (
    SELECT job_id, attempt, error_code, detail, finished_at FROM job_attempts a
    WHERE a.job_id = r.id AND a.outcome IN ('retryable', 'dead', 'lease_expired')
    ORDER BY a.finished_at DESC
    LIMIT 1
) a
ORDER BY a.finished_at DESC
LIMIT 1;

-- name: webhook_endpoint_dead_count
-- How many of the endpoint's deliveries are dead (jobs_webhook_endpoint_dead_idx).
SELECT count(*) AS n FROM jobs
WHERE tenant_id = %(tenant_id)s AND type = 'webhook.deliver' AND status = 'dead'
  AND payload->>'endpoint_id' = %(endpoint_id)s;

-- name: webhook_endpoint_summaries
-- The Webhooks list and the Deliveries table (issue 44): for each listed endpoint
-- (the pairs %(tenant_ids)s / %(endpoint_ids)s), what its page shows in brief: its
-- failure rate over its newest %(window)s deliveries' attempts finished since
-- %(since)s, the newest failed attempt among them (code, redacted detail, job),
-- and its dead deliveries counted up to %(dead_cap)s.  One statement for the whole
-- list, each endpoint read through the same indexes as webhook_endpoint_health
-- (jobs_webhook_endpoint_idx, then job_attempts_job_idx per delivery;
-- jobs_webhook_endpoint_dead_idx): bounded work per endpoint however busy it is, so
-- a list that refreshes itself stays cheap.  The rate and the last error come from
-- one pass over the window's attempts: a separate "newest failure" subquery is
-- planned as a walk of every failed attempt by time (job_attempts_failed_idx),
-- seconds on a busy database.
WITH e AS (
    SELECT * FROM unnest(%(tenant_ids)s::uuid[], %(endpoint_ids)s::text[]) AS e(tenant_id, endpoint_id)
)
SELECT e.endpoint_id, w.calls, w.failures, (w.last).job_id AS last_error_job_id, (w.last).error_code AS last_error,
       (w.last).detail AS last_error_detail, (w.last).finished_at AS last_error_at, dead.n AS dead_count
FROM e
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE a.finished_at >= %(since)s
                              AND a.outcome IN ('succeeded', 'retryable', 'dead', 'lease_expired')) AS calls,
           count(*) FILTER (WHERE a.finished_at >= %(since)s
                              AND a.outcome IN ('retryable', 'dead', 'lease_expired')) AS failures,
           (array_agg(a ORDER BY a.finished_at DESC)
                FILTER (WHERE a.outcome IN ('retryable', 'dead', 'lease_expired')))[1] AS last
    FROM (SELECT id FROM jobs
          WHERE tenant_id = e.tenant_id AND type = 'webhook.deliver' AND payload->>'endpoint_id' = e.endpoint_id
          ORDER BY id DESC LIMIT %(window)s) r
    JOIN job_attempts a ON a.job_id = r.id
) w
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM jobs
        WHERE tenant_id = e.tenant_id AND type = 'webhook.deliver' AND status = 'dead'
          AND payload->>'endpoint_id' = e.endpoint_id
        LIMIT %(dead_cap)s) d
) dead;

-- name: webhook_endpoint_dead_list
-- The endpoint's newest dead deliveries (jobs_webhook_endpoint_dead_idx).
SELECT id, attempts, last_error_code, finished_at FROM jobs
WHERE tenant_id = %(tenant_id)s AND type = 'webhook.deliver' AND status = 'dead'
  AND payload->>'endpoint_id' = %(endpoint_id)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: webhook_endpoint_latency
-- One webhook endpoint's answer time (issue 50): p50 and p95 of the duration of
-- the newest %(window)s attempts that reached it (succeeded, retryable, dead,
-- lease_expired; not snoozed or released), among its newest %(window)s
-- deliveries (jobs_webhook_endpoint_idx, job_attempts_job_idx).
WITH recent AS (
    SELECT id FROM jobs
    WHERE tenant_id = %(tenant_id)s AND type = 'webhook.deliver' AND payload->>'endpoint_id' = %(endpoint_id)s
    ORDER BY id DESC
    LIMIT %(window)s
), tried AS (
    SELECT a.duration_ms FROM recent r JOIN job_attempts a ON a.job_id = r.id
    WHERE a.outcome IN ('succeeded', 'retryable', 'dead', 'lease_expired')
    ORDER BY a.finished_at DESC
    LIMIT %(window)s
)
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95, count(*) AS n
FROM tried;
