DROP TABLE email_outbox;
DROP TABLE pending_registrations;
DROP TABLE sso_domains;
DROP TABLE sso_connections;
DROP TABLE admin_audit_events;
DROP INDEX refresh_tokens_expires_idx;
ALTER TABLE refresh_tokens DROP COLUMN successor_sealed;
DROP TABLE sessions;
DROP TABLE invites;
DROP INDEX api_keys_org_team_idx;
ALTER TABLE api_keys DROP COLUMN updated_at;
DROP INDEX team_members_user_idx;
DROP INDEX teams_org_list_idx;
ALTER TABLE teams DROP COLUMN updated_at, DROP COLUMN rate_limits, DROP COLUMN budget,
    DROP COLUMN default_policies, DROP COLUMN description;
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
DROP INDEX users_email_normalized_key;
ALTER TABLE users DROP COLUMN email_normalized;
DELETE FROM org_memberships WHERE role = 'viewer';
ALTER TABLE org_memberships DROP CONSTRAINT org_memberships_role_check;
ALTER TABLE org_memberships ADD CONSTRAINT org_memberships_role_check
    CHECK (role IN ('owner', 'admin', 'member'));
