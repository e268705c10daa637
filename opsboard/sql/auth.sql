-- name: tenant_insert
-- Create a tenant.
INSERT INTO tenants (id, slug, name, is_operator, weight)
VALUES (%(id)s, %(slug)s, %(name)s, %(is_operator)s, %(weight)s)
RETURNING *;

-- name: tenant_get_by_slug
-- One tenant by slug.
SELECT * FROM tenants WHERE slug = %(slug)s;

-- name: tenant_set_pii_mode
-- Set what the HTTP API does with personal data in the tenant's payloads; the mode it had before.
UPDATE tenants t SET pii_mode = %(mode)s FROM (SELECT id, pii_mode FROM tenants WHERE id = %(id)s FOR UPDATE) old
WHERE t.id = old.id
RETURNING t.id, old.pii_mode AS before, t.pii_mode AS after;

-- name: tenant_limits_get_for_update
-- A tenant's enqueue rate, burst and concurrency (NULL: the default), locked for a change.
SELECT id, slug, enqueue_rate, enqueue_burst, max_running FROM tenants WHERE id = %(id)s FOR UPDATE;

-- name: tenant_limits_set
-- Set a tenant's enqueue rate, burst and concurrency (NULL: back to the default).  A change of
-- max_running notifies every worker (trigger tenants_max_running_notify, migration 0029).
UPDATE tenants SET enqueue_rate = %(rate)s, enqueue_burst = %(burst)s, max_running = %(max_running)s
WHERE id = %(id)s
RETURNING id, slug, enqueue_rate, enqueue_burst, max_running;

-- name: tenant_limits_list
-- The tenants with a limit of their own (enqueue rate, burst or concurrency), by slug.
SELECT slug, enqueue_rate, enqueue_burst, max_running FROM tenants
WHERE enqueue_rate IS NOT NULL OR enqueue_burst IS NOT NULL OR max_running IS NOT NULL
ORDER BY slug;

-- name: tenant_max_running_list
-- The tenants with a concurrency limit (usually none), for the claim (opsboard.pauses.read_holds).
SELECT id, max_running FROM tenants WHERE max_running IS NOT NULL ORDER BY id;

-- name: tenant_list_visible
-- Tenants inside a scope, by name.
SELECT id, slug, name, is_operator, weight FROM tenants
WHERE (%(scope_all)s OR id = ANY(%(scope_ids)s::uuid[]))
ORDER BY name;

-- name: user_insert
-- Create a user.
INSERT INTO users (id, email, display_name, password_hash)
VALUES (%(id)s, %(email)s, %(display_name)s, %(password_hash)s)
RETURNING id, email, display_name, is_active;

-- name: user_get_by_email
-- A user with the password hash, for login.
SELECT id, email, display_name, password_hash, is_active FROM users WHERE email = %(email)s;

-- name: user_get
-- A user without the password hash.
SELECT id, email, display_name, is_active, locale, calendar, time_zone FROM users WHERE id = %(id)s;

-- name: user_set_display_prefs
-- A user's dashboard language, calendar and time zone (NULL = the defaults).
UPDATE users SET locale = %(locale)s, calendar = %(calendar)s, time_zone = %(time_zone)s
WHERE id = %(id)s
RETURNING id;

-- name: user_set_password
-- Replace a user's password hash.
UPDATE users SET password_hash = %(password_hash)s WHERE id = %(id)s;

-- name: user_touch_login
-- Remember the last successful login.
UPDATE users SET last_login_at = now() WHERE id = %(id)s;

-- name: membership_upsert
-- Grant a role in a tenant (or reactivate it).
INSERT INTO memberships (user_id, tenant_id, role, active)
VALUES (%(user_id)s, %(tenant_id)s, %(role)s, true)
ON CONFLICT (user_id, tenant_id, role) DO UPDATE SET active = true
RETURNING *;

-- name: membership_list_for_user
-- A user's active memberships with their tenants.
SELECT m.tenant_id, t.slug AS tenant_slug, t.name AS tenant_name, t.is_operator, m.role::text AS role
FROM memberships m JOIN tenants t ON t.id = m.tenant_id
WHERE m.user_id = %(user_id)s AND m.active
ORDER BY t.name, m.role;

-- name: login_failure_counts
-- Failed logins of one account and of one address inside the window.
SELECT
    (SELECT count(*) FROM login_failures
      WHERE email = %(email)s AND at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)) AS account,
    (SELECT count(*) FROM login_failures
      WHERE address = %(address)s AND at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)) AS address,
    (SELECT max(at) FROM login_failures
      WHERE (email = %(email)s OR address = %(address)s)
        AND at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s)) AS newest;

-- name: login_failure_clear_account
-- A successful login forgets the account's failures.
DELETE FROM login_failures WHERE email = %(email)s;

-- name: login_failure_prune
-- Forget failures older than the window.
DELETE FROM login_failures WHERE at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(window)s);

-- name: tenant_get_visible
-- One tenant inside a scope.
SELECT id, slug, name, is_operator, weight, enqueue_rate, enqueue_burst, max_running, created_at FROM tenants
WHERE id = %(id)s AND (%(scope_all)s OR id = ANY(%(scope_ids)s::uuid[]));

-- name: login_lock_account
-- Serialize throttle checks of one account: the count and the insert of a
-- login attempt are one atomic step (transaction-scoped, released at commit).
SELECT pg_advisory_xact_lock(hashtextextended('opsboard.login.account:' || %(email)s, 0));

-- name: login_lock_address
-- The same for one client address (always taken after the account lock: one order, no deadlock).
SELECT pg_advisory_xact_lock(hashtextextended('opsboard.login.address:' || %(address)s, 0));

-- name: login_attempt_insert
-- Reserve a login attempt inside the throttle window; a success deletes it again.
INSERT INTO login_failures (email, address, at)
VALUES (%(email)s, %(address)s, coalesce(%(now)s::timestamptz, now()))
RETURNING id;

-- name: login_attempt_delete
-- A successful login's reservation is not a failure.
DELETE FROM login_failures WHERE id = %(id)s;

-- name: session_insert
-- Remember a new browser session (its id only as a hash).
INSERT INTO user_sessions (id_hash, user_id, expires_at)
VALUES (%(id_hash)s, %(user_id)s, coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lifetime)s));

-- name: session_is_live
-- Whether a session still exists and has not expired.
SELECT 1 AS live FROM user_sessions
WHERE id_hash = %(id_hash)s AND user_id = %(user_id)s AND expires_at > coalesce(%(now)s::timestamptz, now());

-- name: session_delete
-- End one session (sign out).
DELETE FROM user_sessions WHERE id_hash = %(id_hash)s;

-- name: session_delete_for_user
-- End every session of a user (sign out everywhere, password change, deactivation).
DELETE FROM user_sessions WHERE user_id = %(user_id)s;

-- name: session_prune
-- Forget expired sessions.
DELETE FROM user_sessions WHERE expires_at <= coalesce(%(now)s::timestamptz, now());

-- name: user_set_active
-- Activate or deactivate a user.
UPDATE users SET is_active = %(active)s WHERE id = %(id)s RETURNING id;

-- name: user_count_sessions
-- How many live sessions a user has (shown on their own page).
SELECT count(*) AS n FROM user_sessions WHERE user_id = %(user_id)s AND expires_at > now();

-- name: user_tenants
-- The tenants where a user has an active membership (first: the oldest).
SELECT m.tenant_id, t.slug FROM memberships m JOIN tenants t ON t.id = m.tenant_id
WHERE m.user_id = %(user_id)s AND m.active
GROUP BY m.tenant_id, t.slug ORDER BY min(m.created_at), t.slug;

-- name: tenant_users_with_role
-- Users holding an active membership with a role in a tenant (recipients such as "the tenant's admins").
SELECT DISTINCT m.user_id FROM memberships m JOIN users u ON u.id = m.user_id
WHERE m.tenant_id = %(tenant_id)s AND m.role::text = ANY(%(roles)s::text[]) AND m.active AND u.is_active
ORDER BY m.user_id;
