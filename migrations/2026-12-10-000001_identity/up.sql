-- Identity (issue 31): SSO identities linked only with proof, e-mail domains proven through DNS,
-- recoverable accounts (password reset, TOTP with recovery codes), service accounts for
-- automation, and an outbox a mail relay can retry.

-- An identity provider's user, as (connection, issuer, subject), linked to one account. Sign-in
-- through SSO matches on this, never on the address the provider asserts.
CREATE TABLE sso_identities (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    connection_id UUID NOT NULL REFERENCES sso_connections (id) ON DELETE CASCADE,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL CHECK (char_length(subject) BETWEEN 1 AND 255),
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- How the link was proven: `provisioned` (a new account created by this sign-in),
    -- `password` (the account's password, given after the provider's sign-in).
    linked_by TEXT NOT NULL CHECK (linked_by IN ('provisioned', 'password')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_sign_in_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX sso_identities_subject_key ON sso_identities (connection_id, issuer, subject);
CREATE UNIQUE INDEX sso_identities_user_key ON sso_identities (connection_id, user_id);
CREATE INDEX sso_identities_user_idx ON sso_identities (user_id);

-- A domain is claimed by a connection, and active only once a DNS TXT record proves the
-- organization controls it. Many organizations may claim a domain; one may prove it.
ALTER TABLE sso_domains DROP CONSTRAINT sso_domains_pkey;
ALTER TABLE sso_domains ADD COLUMN verification_token TEXT NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', '');
ALTER TABLE sso_domains ALTER COLUMN verification_token DROP DEFAULT;
ALTER TABLE sso_domains ADD COLUMN verified_at TIMESTAMPTZ;
ALTER TABLE sso_domains ADD COLUMN checked_at TIMESTAMPTZ;
ALTER TABLE sso_domains ADD COLUMN created_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE sso_domains ADD PRIMARY KEY (connection_id, domain);
CREATE UNIQUE INDEX sso_domains_verified_key ON sso_domains (domain) WHERE verified_at IS NOT NULL;
CREATE INDEX sso_domains_org_idx ON sso_domains (org_id);

-- Service accounts are users of their own kind: a membership with a role, no password, one
-- token (prefix + SHA-256) and optional operation scopes.
ALTER TABLE users ADD COLUMN kind TEXT NOT NULL DEFAULT 'person' CHECK (kind IN ('person', 'service'));
-- TOTP: the secret sealed with the master keyring (bound to the user); enabled once confirmed.
ALTER TABLE users ADD COLUMN totp_secret_sealed BYTEA;
ALTER TABLE users ADD COLUMN totp_key_version SMALLINT;
ALTER TABLE users ADD COLUMN totp_enabled_at TIMESTAMPTZ;
-- The last accepted TOTP time step: a code works once.
ALTER TABLE users ADD COLUMN totp_last_step BIGINT;

CREATE TABLE recovery_codes (
    id UUID PRIMARY KEY,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash BYTEA NOT NULL CHECK (octet_length(code_hash) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    used_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX recovery_codes_hash_key ON recovery_codes (user_id, code_hash);

ALTER TABLE organizations ADD COLUMN require_totp BOOLEAN NOT NULL DEFAULT false;

-- A session opened by a password sign-in into an organization that requires a second factor,
-- for a user without one: good only for enrolling it.
ALTER TABLE sessions ADD COLUMN scope TEXT NOT NULL DEFAULT 'full' CHECK (scope IN ('full', 'totp_enrollment'));
CREATE INDEX sessions_user_live_idx ON sessions (user_id) WHERE revoked_at IS NULL;

CREATE TABLE password_resets (
    id UUID PRIMARY KEY,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    used_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX password_resets_token_hash_key ON password_resets (token_hash);
CREATE INDEX password_resets_user_idx ON password_resets (user_id, created_at DESC);

CREATE TABLE service_accounts (
    id UUID PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    role TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    -- `resource:read` / `resource:write` (`*` for every resource); empty: everything the role may.
    scopes TEXT[] NOT NULL DEFAULT '{}',
    token_prefix TEXT NOT NULL,
    token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),
    created_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX service_accounts_token_hash_key ON service_accounts (token_hash);
CREATE INDEX service_accounts_org_idx ON service_accounts (org_id, id DESC);

-- The relay's bookkeeping: bounded attempts with backoff, the last error, a final failure.
ALTER TABLE email_outbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE email_outbox ADD COLUMN next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE email_outbox ADD COLUMN last_error TEXT;
ALTER TABLE email_outbox ADD COLUMN failed_at TIMESTAMPTZ;
DROP INDEX email_outbox_unsent_idx;
CREATE INDEX email_outbox_due_idx ON email_outbox (next_attempt_at) WHERE sent_at IS NULL AND failed_at IS NULL;
