-- 0093: a slow concurrency key is slowed down further (issue 50).
--
-- A key's own lower limit, for a while: a webhook endpoint whose answer took
-- more than half the webhook timeout gets a limit of 1 delivery in flight for
-- five minutes from its last slow answer (opsboard.deliveries.handlers), below
-- the type's limit per key.  The claim reads it for keyed candidates only, one
-- primary-key probe each, and ignores rows past their "until" (nothing deletes
-- them on the hot path; the row is overwritten by the next slow answer).
-- No tenant_id: a key names its own scope (webhook:<endpoint id>), and the
-- rows are the platform's (written by the worker, read by the claim).
CREATE TABLE concurrency_key_limits (
    key         text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 200),
    max_running integer NOT NULL CHECK (max_running >= 1),
    reason      text NOT NULL,
    until       timestamptz NOT NULL,
    set_at      timestamptz NOT NULL DEFAULT now()
);
