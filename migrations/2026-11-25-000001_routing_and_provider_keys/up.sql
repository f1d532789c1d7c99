-- Model allow-lists: NULL means every model; an empty array means none.
ALTER TABLE api_keys ADD COLUMN allowed_models TEXT[];
ALTER TABLE teams ADD COLUMN allowed_models TEXT[];

-- Provider keys: which master key sealed the secret (so the master key can be rotated), when the
-- record last changed, and at most one live key per organization and provider.
ALTER TABLE provider_keys ADD COLUMN key_version SMALLINT NOT NULL DEFAULT 1 CHECK (key_version > 0);
ALTER TABLE provider_keys ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
CREATE UNIQUE INDEX provider_keys_org_provider_live_key ON provider_keys (org_id, provider) WHERE revoked_at IS NULL;
CREATE INDEX provider_keys_org_list_idx ON provider_keys (org_id, created_at DESC, id DESC);
DROP INDEX provider_keys_org_idx;

-- Prompt tokens written to the provider's cache (priced apart by Anthropic).
ALTER TABLE audit_logs ADD COLUMN cache_creation_tokens INTEGER NOT NULL DEFAULT 0;
