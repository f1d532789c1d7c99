ALTER TABLE provider_keys DROP COLUMN version;
