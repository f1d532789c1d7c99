-- Regenerating a key gives it a new secret under the same id; the secret it replaces may keep
-- working for a grace period the caller chose, so clients can switch without failed requests.
ALTER TABLE api_keys ADD COLUMN previous_key_hash BYTEA;
ALTER TABLE api_keys ADD COLUMN previous_key_expires_at TIMESTAMPTZ;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_previous_key_pair
    CHECK ((previous_key_hash IS NULL) = (previous_key_expires_at IS NULL));
CREATE UNIQUE INDEX api_keys_previous_key_hash ON api_keys (previous_key_hash)
    WHERE previous_key_hash IS NOT NULL;
