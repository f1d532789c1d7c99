-- Control plane: viewer role, normalized e-mails, team settings, invites, sessions with an
-- absolute lifetime, the admin audit trail and SSO connections.

ALTER TABLE org_memberships DROP CONSTRAINT org_memberships_role_check;
ALTER TABLE org_memberships ADD CONSTRAINT org_memberships_role_check
    CHECK (role IN ('owner', 'admin', 'member', 'viewer'));

-- One normalized form (NFKC, Unicode lower case) is what identifies an account; `email` keeps
-- what the user typed. Rows from before this migration get the closest SQL can do.
ALTER TABLE users ADD COLUMN email_normalized TEXT;
UPDATE users SET email_normalized = lower(normalize(btrim(email), NFKC));
ALTER TABLE users ALTER COLUMN email_normalized SET NOT NULL;
CREATE UNIQUE INDEX users_email_normalized_key ON users (email_normalized);
DROP INDEX users_email_key;

-- Team settings stored here and enforced by the limits and policy steps.
ALTER TABLE teams ADD COLUMN description TEXT NOT NULL DEFAULT '' CHECK (char_length(description) <= 2000);
ALTER TABLE teams ADD COLUMN default_policies TEXT[] NOT NULL DEFAULT '{}';
ALTER TABLE teams ADD COLUMN budget JSONB;
ALTER TABLE teams ADD COLUMN rate_limits JSONB;
ALTER TABLE teams ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
CREATE INDEX teams_org_list_idx ON teams (org_id, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX team_members_user_idx ON team_members (user_id);

ALTER TABLE api_keys ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now();
CREATE INDEX api_keys_org_team_idx ON api_keys (org_id, team_id, id DESC);

CREATE TABLE invites (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    email_normalized TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    team_ids UUID[] NOT NULL DEFAULT '{}',
    token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),
    invited_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    accepted_at TIMESTAMPTZ,
    accepted_by UUID REFERENCES users (id) ON DELETE SET NULL,
    revoked_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX invites_token_hash_key ON invites (token_hash);
CREATE INDEX invites_org_idx ON invites (org_id, id DESC);

-- A sign-in: every refresh token of one login belongs to one session (its family). The session
-- ends at `expires_at` whatever the refreshes, or when revoked (logout, reuse, removal).
CREATE TABLE sessions (
    id UUID PRIMARY KEY,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    method TEXT NOT NULL DEFAULT 'password' CHECK (method IN ('password', 'sso', 'invite')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX sessions_user_org_idx ON sessions (user_id, org_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);
INSERT INTO sessions (id, user_id, org_id, created_at, expires_at, revoked_at)
SELECT family_id, min(user_id::text)::uuid, min(org_id::text)::uuid, min(created_at), max(expires_at),
       CASE WHEN bool_and(revoked_at IS NOT NULL) THEN max(revoked_at) END
FROM refresh_tokens GROUP BY family_id;

-- The successor of a rotated refresh token, sealed with a key derived from the rotated token
-- itself, so a concurrent refresh inside the grace window gets the same successor.
ALTER TABLE refresh_tokens ADD COLUMN successor_sealed BYTEA;
CREATE INDEX refresh_tokens_expires_idx ON refresh_tokens (expires_at);

-- Who did what to which resource through /api/v1. Never secrets.
CREATE TABLE admin_audit_events (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    actor_user_id UUID,
    actor_role TEXT,
    action TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id TEXT,
    request_id TEXT,
    detail JSONB NOT NULL DEFAULT '{}'::jsonb,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX admin_audit_events_org_idx ON admin_audit_events (org_id, id DESC);

CREATE TABLE sso_connections (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    -- AES-256-GCM under the master keyring, like provider keys.
    client_secret_sealed BYTEA NOT NULL,
    key_version SMALLINT NOT NULL DEFAULT 1,
    email_domains TEXT[] NOT NULL,
    groups_claim TEXT NOT NULL DEFAULT 'groups',
    -- {"group name": "role"}: the highest role among a user's groups wins.
    role_mapping JSONB NOT NULL DEFAULT '{}'::jsonb,
    -- {"group name": ["team id", ...]}
    team_mapping JSONB NOT NULL DEFAULT '{}'::jsonb,
    default_role TEXT NOT NULL DEFAULT 'member' CHECK (default_role IN ('admin', 'member', 'viewer')),
    enabled BOOLEAN NOT NULL DEFAULT true,
    created_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX sso_connections_org_idx ON sso_connections (org_id, id DESC);
-- An e-mail domain signs in through at most one connection, across all organizations.
CREATE TABLE sso_domains (
    domain TEXT PRIMARY KEY,
    connection_id UUID NOT NULL REFERENCES sso_connections (id) ON DELETE CASCADE,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE
);

-- Sign-ups waiting for their address to be confirmed (admin.email_verification = true): the
-- account and organization are created only when the link's token comes back.
CREATE TABLE pending_registrations (
    id UUID PRIMARY KEY,
    email TEXT NOT NULL,
    email_normalized TEXT NOT NULL,
    name TEXT NOT NULL,
    org_name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX pending_registrations_token_hash_key ON pending_registrations (token_hash);
CREATE INDEX pending_registrations_expires_idx ON pending_registrations (expires_at);

-- Mail to send. gw writes it here in the transaction that needs it; a mailer delivers it.
CREATE TABLE email_outbox (
    id UUID PRIMARY KEY,
    to_address TEXT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at TIMESTAMPTZ
);
CREATE INDEX email_outbox_unsent_idx ON email_outbox (created_at) WHERE sent_at IS NULL;
