-- Foundation schema: tenants, identities, credentials and the audit log.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE organizations (
    id UUID PRIMARY KEY,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    plan TEXT NOT NULL DEFAULT 'free' CHECK (plan IN ('free', 'growth', 'enterprise')),
    data_residency_region TEXT NOT NULL DEFAULT 'us',
    metadata JSONB NOT NULL DEFAULT '{}'::jsonb,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id UUID PRIMARY KEY,
    email TEXT NOT NULL,
    name TEXT NOT NULL,
    password_hash TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE org_memberships (
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX org_memberships_user_idx ON org_memberships (user_id);

CREATE TABLE teams (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    metadata JSONB NOT NULL DEFAULT '{}'::jsonb,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    deleted_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX teams_org_name_key ON teams (org_id, lower(name)) WHERE deleted_at IS NULL;
-- Lets child tables reference (org_id, id) so a row can never point at another tenant's team.
CREATE UNIQUE INDEX teams_org_id_id_key ON teams (org_id, id);

CREATE TABLE team_members (
    org_id UUID NOT NULL,
    team_id UUID NOT NULL,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role TEXT NOT NULL DEFAULT 'member' CHECK (role IN ('lead', 'member')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, user_id),
    FOREIGN KEY (org_id, team_id) REFERENCES teams (org_id, id) ON DELETE CASCADE
);

CREATE TABLE api_keys (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    team_id UUID,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    key_prefix TEXT NOT NULL,
    key_hash BYTEA NOT NULL CHECK (octet_length(key_hash) = 32),
    permissions TEXT[] NOT NULL,
    created_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    expires_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ,
    FOREIGN KEY (org_id, team_id) REFERENCES teams (org_id, id)
);
CREATE UNIQUE INDEX api_keys_key_hash_key ON api_keys (key_hash);
CREATE INDEX api_keys_org_created_idx ON api_keys (org_id, created_at DESC, id DESC);

CREATE TABLE refresh_tokens (
    id UUID PRIMARY KEY,
    user_id UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    family_id UUID NOT NULL,
    token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    used_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX refresh_tokens_hash_key ON refresh_tokens (token_hash);
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family_id);

CREATE TABLE provider_keys (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    -- AES-256-GCM: 12-byte nonce || ciphertext || 16-byte tag; the key comes from GW_ENCRYPTION_KEY.
    secret_ciphertext BYTEA NOT NULL,
    secret_hint TEXT NOT NULL,
    created_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    rotated_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX provider_keys_org_idx ON provider_keys (org_id, created_at DESC);

-- One row per proxied request; id is the request id (UUIDv7, so time-ordered).
CREATE TABLE audit_logs (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL,
    team_id UUID,
    api_key_id UUID,
    endpoint TEXT NOT NULL,
    model TEXT,
    provider TEXT,
    upstream_model TEXT,
    status_code INTEGER NOT NULL,
    error_type TEXT,
    stream BOOLEAN NOT NULL DEFAULT false,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd NUMERIC(20, 10) NOT NULL DEFAULT 0,
    latency_ms INTEGER NOT NULL,
    upstream_latency_ms INTEGER,
    ttft_ms INTEGER,
    cache_status TEXT NOT NULL DEFAULT 'miss',
    policy_action TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_logs_org_created_idx ON audit_logs (org_id, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_team_created_idx ON audit_logs (org_id, team_id, created_at DESC);
