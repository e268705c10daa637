-- The demo application's named queries (opsboard.tools.demo_domain.DEMO_QUERIES),
-- over the tables of opsboard/tools/demo_schema.sql.  Loaded apart from the
-- product's opsboard/sql: a production process has none of them.

-- name: demo_user_insert
-- A user of a tenant signs up.
INSERT INTO demo_users (id, tenant_id, email, plan) VALUES (%(id)s, %(tenant_id)s, %(email)s, %(plan)s)
RETURNING id, tenant_id, plan, created_at;

-- name: demo_user_by_email
-- The demo domain's user row of an email in a tenant (the demo's end user).
SELECT * FROM demo_users WHERE tenant_id = %(tenant_id)s AND email = %(email)s ORDER BY created_at LIMIT 1;

-- name: demo_order_insert
-- An order is paid.
INSERT INTO demo_orders (id, tenant_id, user_id, amount_cents, currency)
VALUES (%(id)s, %(tenant_id)s, %(user_id)s, %(amount_cents)s, %(currency)s)
RETURNING id, tenant_id, amount_cents, currency, paid_at;

-- name: demo_order_recipient
-- The platform user matching the demo user of an order (by email), if any.
SELECT u.id AS user_id FROM demo_orders o JOIN demo_users du ON du.id = o.user_id JOIN users u ON u.email = du.email
WHERE o.id = %(order_id)s::uuid;

-- name: demo_otp_insert
-- A one-time password is requested for a phone number.
INSERT INTO demo_otp_requests (id, tenant_id, phone, code, expires_at)
VALUES (%(id)s, %(tenant_id)s, %(phone)s, %(code)s, coalesce(%(now)s::timestamptz, now()) + %(ttl)s::interval)
RETURNING id, tenant_id, created_at, expires_at;

-- name: demo_otp_recipient
-- The platform users of a tenant whose notification phone is the OTP's phone, and the code.
SELECT p.user_id, r.code FROM demo_otp_requests r
JOIN notification_profiles p ON p.phone = r.phone
JOIN memberships m ON m.user_id = p.user_id AND m.tenant_id = r.tenant_id AND m.active
WHERE r.id = %(otp_id)s::uuid;

-- name: demo_effect_record
-- A demo consumer's effect, once per (subscriber, event) however often the job runs.
INSERT INTO demo_effects (subscriber, event_id, job_id, tenant_id, aggregate, detail)
VALUES (%(subscriber)s, %(event_id)s, %(job_id)s, %(tenant_id)s, %(aggregate)s, %(detail)s)
ON CONFLICT (subscriber, event_id) DO NOTHING
RETURNING seq;
