DROP TABLE events;
ALTER TABLE api_keys DROP COLUMN rate_limits;
ALTER TABLE api_keys DROP COLUMN budget;
ALTER TABLE organizations DROP COLUMN rate_limits;
ALTER TABLE organizations DROP COLUMN budget;
