-- The overview groups by API key, and teams and keys show their spend: the hourly aggregates
-- gain the key. Existing aggregates are dropped and the rollup job rebuilds them from the audit
-- log (the overview reads hours not yet rebuilt from the log itself, so answers stay exact
-- while it catches up).
ALTER TABLE audit_rollups_hourly ADD COLUMN api_key_id UUID;
DROP INDEX audit_rollups_hourly_key;
TRUNCATE audit_rollups_hourly;
CREATE UNIQUE INDEX audit_rollups_hourly_key
    ON audit_rollups_hourly (org_id, hour, team_id, api_key_id, model, provider) NULLS NOT DISTINCT;
UPDATE audit_rollup_state SET rolled_until = '1970-01-01T00:00:00Z', scanned_until = '1970-01-01T00:00:00Z';
