-- Customers' webhook receivers. The signing secret is sealed with the master keyring (AES-256-GCM,
-- the row's organization and id as associated data); after a rotation the previous secret signs
-- too until `previous_expires_at`.
CREATE TABLE webhook_endpoints (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    url TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    event_types TEXT[] NOT NULL,
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    secret_ciphertext BYTEA NOT NULL,
    key_version SMALLINT NOT NULL,
    previous_ciphertext BYTEA,
    previous_key_version SMALLINT,
    previous_expires_at TIMESTAMPTZ,
    created_by UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org_id, id DESC);
