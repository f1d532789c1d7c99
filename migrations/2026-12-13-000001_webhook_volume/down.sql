DROP INDEX api_keys_expiring;
ALTER TABLE api_keys DROP COLUMN expiry_announced_at;
ALTER TABLE org_memberships DROP COLUMN alert_emails;
ALTER TABLE webhook_attempts DROP COLUMN manual;
DROP INDEX webhook_deliveries_event;
DROP INDEX webhook_deliveries_history;
DROP INDEX webhook_deliveries_recent;
DROP INDEX webhook_deliveries_queued;
DROP INDEX webhook_deliveries_coalesce;
DELETE FROM webhook_deliveries WHERE status = 'dropped';
ALTER TABLE webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'succeeded', 'failed')),
    DROP COLUMN coalesce_key,
    DROP COLUMN auto_attempts,
    DROP COLUMN claimed_until;
