-- Webhook deliveries past their first cut (issue 33): a claim is a lease of its own
-- (`claimed_until`), apart from when the next automatic attempt is due, so a manual retry can tell
-- an attempt in flight from one scheduled; `auto_attempts` counts the automatic attempts (at most
-- 3), `attempts` every attempt; a summary of coalesced `policy.blocked` events carries a
-- `coalesce_key` (one per endpoint and minute); `dropped` is a delivery refused because its
-- endpoint's queue was full.
ALTER TABLE webhook_deliveries
    ADD COLUMN claimed_until TIMESTAMPTZ,
    ADD COLUMN auto_attempts INT NOT NULL DEFAULT 0,
    ADD COLUMN coalesce_key TEXT,
    DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'succeeded', 'failed', 'dropped'));
UPDATE webhook_deliveries SET auto_attempts = attempts;
CREATE UNIQUE INDEX webhook_deliveries_coalesce ON webhook_deliveries (endpoint_id, coalesce_key)
    WHERE coalesce_key IS NOT NULL;
CREATE INDEX webhook_deliveries_queued ON webhook_deliveries (endpoint_id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (endpoint_id, event_type, created_at);
CREATE INDEX webhook_deliveries_history ON webhook_deliveries (created_at) WHERE status <> 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (org_id, event_type, id DESC);

ALTER TABLE webhook_attempts ADD COLUMN manual BOOLEAN NOT NULL DEFAULT FALSE;

-- Which alerts an owner or admin chose to receive by e-mail: 'budget', 'security'.
ALTER TABLE org_memberships ADD COLUMN alert_emails TEXT[] NOT NULL DEFAULT '{}';

-- When `api_key.expired` was written for a key (once).
ALTER TABLE api_keys ADD COLUMN expiry_announced_at TIMESTAMPTZ;
-- Keys that expired before there were webhooks are not announced now.
UPDATE api_keys SET expiry_announced_at = expires_at WHERE expires_at <= now();
CREATE INDEX api_keys_expiring ON api_keys (expires_at)
    WHERE expires_at IS NOT NULL AND expiry_announced_at IS NULL AND revoked_at IS NULL;
