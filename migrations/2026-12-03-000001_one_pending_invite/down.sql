DROP INDEX IF EXISTS invites_one_pending;
