ALTER TABLE audit_logs DROP COLUMN cache_creation_tokens;
CREATE INDEX provider_keys_org_idx ON provider_keys (org_id, created_at DESC);
DROP INDEX provider_keys_org_list_idx;
DROP INDEX provider_keys_org_provider_live_key;
ALTER TABLE provider_keys DROP COLUMN updated_at;
ALTER TABLE provider_keys DROP COLUMN key_version;
ALTER TABLE teams DROP COLUMN allowed_models;
ALTER TABLE api_keys DROP COLUMN allowed_models;
