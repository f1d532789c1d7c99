ALTER TABLE teams DROP COLUMN mandatory_policies;
