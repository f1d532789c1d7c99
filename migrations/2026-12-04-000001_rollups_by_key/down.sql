DROP INDEX audit_rollups_hourly_key;
TRUNCATE audit_rollups_hourly;
ALTER TABLE audit_rollups_hourly DROP COLUMN api_key_id;
CREATE UNIQUE INDEX audit_rollups_hourly_key
    ON audit_rollups_hourly (org_id, hour, team_id, model, provider) NULLS NOT DISTINCT;
UPDATE audit_rollup_state SET rolled_until = '1970-01-01T00:00:00Z', scanned_until = '1970-01-01T00:00:00Z';
