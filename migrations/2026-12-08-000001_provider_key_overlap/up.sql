-- A rotation may keep the replaced secret for an overlap: proxies send the new secret and, while
-- the overlap lasts, retry a refused credential once with the previous one. A second rotation,
-- a revocation or the end of the overlap ends it.
ALTER TABLE provider_keys
    ADD COLUMN previous_ciphertext bytea,
    ADD COLUMN previous_key_version smallint,
    ADD COLUMN previous_expires_at timestamptz;
