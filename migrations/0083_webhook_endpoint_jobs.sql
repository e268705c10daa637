-- 0083: a webhook endpoint's page (issue 44): its recent deliveries, failure
-- rate, last error and dead count, read per endpoint instead of per tenant.
--
-- The endpoint is named only in a delivery's payload ({"endpoint_id": ...});
-- without an index its page would read every webhook delivery of the tenant.
-- * jobs_webhook_endpoint_idx: an endpoint's deliveries, newest first (the
--   page reads the newest few thousand and their attempts).  One entry per
--   webhook delivery, on the insert path of webhook.deliver jobs only.
-- * jobs_webhook_endpoint_dead_idx: its dead deliveries, counted and listed
--   (dead rows only: no entry on the hot path).
--
-- Migrations run in a transaction (plain CREATE INDEX, writes to jobs wait
-- while it builds): on a large table build both first with CREATE INDEX
-- CONCURRENTLY under the same names (docs/operations.md), then migrate.
CREATE INDEX IF NOT EXISTS jobs_webhook_endpoint_idx ON jobs (tenant_id, (payload->>'endpoint_id'), id)
    WHERE type = 'webhook.deliver';
CREATE INDEX IF NOT EXISTS jobs_webhook_endpoint_dead_idx ON jobs (tenant_id, (payload->>'endpoint_id'), id)
    WHERE type = 'webhook.deliver' AND status = 'dead';
