DROP INDEX IF EXISTS api_keys_previous_key_hash;
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_previous_key_pair;
ALTER TABLE api_keys DROP COLUMN previous_key_expires_at;
ALTER TABLE api_keys DROP COLUMN previous_key_hash;
