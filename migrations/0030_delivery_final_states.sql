-- Delivery state machine complete (issue 26): a delivery ends delivered, failed, bounced or
-- expired (or suppressed before it starts).
--   queued    written by the fan-out; the deliver job hands it to the provider job
--             (provider_ref = the outbound message id, or "N device(s)" for push) and it stays
--             queued until the provider answers;
--   sent      the provider accepted it (SMTP 250, the SMS gateway's 202, the push service's 201);
--   delivered the recipient's side confirmed it (SMS delivery report, an email DSN "delivered");
--   failed    refused for good (SMTP 5xx, gateway refusal, retries exhausted, an SMS report
--             "failed"/"rejected"): never sent;
--   bounced   accepted, then returned by the far side (an email DSN "failed", an SMS report
--             "undeliverable");
--   expired   its time to live passed before it was sent (the provider job expired), or the
--             destination is gone (Web Push 404/410, an SMS report "expired").
-- Transitions are monotonic (opsboard/sql/notifications.sql): a final state never changes.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_status_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_status_check
    CHECK (status IN ('queued', 'sent', 'delivered', 'failed', 'bounced', 'expired', 'suppressed'));

-- Provider answers arrive with the outbound message id (an SMTP Message-ID in a DSN, an SMS
-- client id): find its delivery without a scan.
CREATE INDEX deliveries_provider_ref_idx ON deliveries (provider_ref) WHERE provider_ref IS NOT NULL;
