DROP TABLE billing_sync_state;
DROP TABLE billing_usage_sync;
ALTER TABLE audit_rollups_hourly DROP COLUMN gateway_cost_usd;
