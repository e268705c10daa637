-- name: otp_request_insert
-- A one-time password for a phone number of a tenant: its hash, never the code.
-- It expires %(ttl_seconds)s after the request (the transaction's clock, or an
-- injected one).
INSERT INTO otp_requests (id, tenant_id, phone, code_hash, created_at, expires_at)
VALUES (%(id)s, %(tenant_id)s, %(phone)s, %(code_hash)s, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(ttl_seconds)s::float8))
RETURNING id, tenant_id, created_at, expires_at;

-- name: otp_request_attempt
-- Count one verification attempt of a usable OTP (not verified, not expired,
-- fewer than %(max_attempts)s attempts so far) and return its hash to compare.
-- The row lock serializes concurrent attempts on one OTP: a second attempt
-- waits for the first to commit, then re-checks the conditions (verified_at
-- set by the first means no row here), so a code is accepted at most once.
UPDATE otp_requests SET attempts = attempts + 1
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND verified_at IS NULL
  AND expires_at > coalesce(%(now)s::timestamptz, now()) AND attempts < %(max_attempts)s
RETURNING id, code_hash, attempts;

-- name: otp_request_mark_verified
-- The right code was given: the OTP is used up.
UPDATE otp_requests SET verified_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND verified_at IS NULL
RETURNING id, verified_at;

-- name: otp_request_get
-- One OTP of a tenant, without its hash: why an attempt was refused.
SELECT id, tenant_id, created_at, expires_at, verified_at, attempts,
       expires_at <= coalesce(%(now)s::timestamptz, now()) AS expired
FROM otp_requests WHERE id = %(id)s AND tenant_id = %(tenant_id)s;
