-- 0026: the demo leaves the product schema; the product's own OTPs arrive
-- (issues 22 and 26).
--
-- 0006 created the demo application's tables in the product schema.  The demo
-- is a plug-in of the tools layer: `opsboard demo` (and the test suite) create
-- them from opsboard/tools/demo_schema.sql after migrating, so a production
-- database has none.  A database that ran the demo loses its demo rows here;
-- `opsboard demo` creates the tables again, empty.
DROP TABLE IF EXISTS demo_effects;
DROP TABLE IF EXISTS demo_otp_requests;
DROP TABLE IF EXISTS demo_orders;
DROP TABLE IF EXISTS demo_users;

-- One-time passwords requested through POST /api/v1/otp (opsboard/otp.py).
-- The code itself is never stored: code_hash is HMAC-SHA256(key = the row's id,
-- message = the code), hex.  The SMS carrying the code is the job `sms.otp` whose
-- idempotency key is 'otp:' || id, enqueued in the same transaction and expiring
-- with the row.
--
-- A row moves: requested (verified_at NULL, attempts < 5, expires_at in the
-- future) -> verified (verify_otp with the right code sets verified_at, once), or
-- -> unusable when expires_at passes or the 5th wrong attempt is counted.  Rows
-- are never deleted by the request path.
CREATE TABLE otp_requests (
    id          uuid PRIMARY KEY,                          -- UUIDv7
    tenant_id   uuid NOT NULL REFERENCES tenants (id),
    phone       text NOT NULL CHECK (phone ~ '^\+[1-9][0-9]{6,14}$'),
    code_hash   text NOT NULL CHECK (code_hash ~ '^[0-9a-f]{64}$'),
    attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    verified_at timestamptz,
    CHECK (expires_at > created_at)
);
-- Every lookup is (tenant, id): the primary key serves it; this index serves
-- a tenant's recent requests (support, abuse checks) and retention by age.
CREATE INDEX otp_requests_tenant_created_idx ON otp_requests (tenant_id, created_at);
