ALTER TABLE provider_keys
    DROP COLUMN previous_ciphertext,
    DROP COLUMN previous_key_version,
    DROP COLUMN previous_expires_at;
