-- A provider key's own version: 1 when added, one more per rotation. It is distinct from
-- `key_version`, the version of the master key that sealed the secret (answered as
-- `master_key_version`). Keys rotated before this column existed start at 2: rotated at least once.
ALTER TABLE provider_keys ADD COLUMN version INT NOT NULL DEFAULT 1;
UPDATE provider_keys SET version = 2 WHERE rotated_at IS NOT NULL;
