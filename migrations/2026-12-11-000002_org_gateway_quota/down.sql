ALTER TABLE organizations DROP COLUMN gateway_quota;
