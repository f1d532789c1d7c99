DROP INDEX email_outbox_due_idx;
ALTER TABLE email_outbox DROP COLUMN failed_at, DROP COLUMN last_error, DROP COLUMN next_attempt_at, DROP COLUMN attempts;
CREATE INDEX email_outbox_unsent_idx ON email_outbox (created_at) WHERE sent_at IS NULL;
DROP TABLE service_accounts;
DROP TABLE password_resets;
DROP INDEX sessions_user_live_idx;
ALTER TABLE sessions DROP COLUMN scope;
ALTER TABLE organizations DROP COLUMN require_totp;
DROP TABLE recovery_codes;
DELETE FROM users WHERE kind = 'service';
ALTER TABLE users DROP COLUMN totp_last_step, DROP COLUMN totp_enabled_at, DROP COLUMN totp_key_version,
    DROP COLUMN totp_secret_sealed, DROP COLUMN kind;
DROP INDEX sso_domains_org_idx;
DROP INDEX sso_domains_verified_key;
ALTER TABLE sso_domains DROP CONSTRAINT sso_domains_pkey;
DELETE FROM sso_domains a USING sso_domains b
    WHERE a.domain = b.domain AND (a.verified_at IS NULL AND b.verified_at IS NOT NULL OR a.ctid < b.ctid AND (a.verified_at IS NULL) = (b.verified_at IS NULL));
ALTER TABLE sso_domains DROP COLUMN created_at, DROP COLUMN checked_at, DROP COLUMN verified_at, DROP COLUMN verification_token;
ALTER TABLE sso_domains ADD PRIMARY KEY (domain);
DROP TABLE sso_identities;
