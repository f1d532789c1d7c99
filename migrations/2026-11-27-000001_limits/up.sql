-- Budgets and rate limits at organization and key level (teams have had them since the control
-- plane); enforced by the proxy's limits step.
ALTER TABLE organizations ADD COLUMN budget JSONB;
ALTER TABLE organizations ADD COLUMN rate_limits JSONB;
ALTER TABLE api_keys ADD COLUMN budget JSONB;
ALTER TABLE api_keys ADD COLUMN rate_limits JSONB;

-- The events outbox: what happened, written once, delivered later (webhooks). `dedupe_key` makes
-- "exactly once" a constraint rather than a hope: a budget threshold crossed on three replicas at
-- once, or again after Redis lost its memory, is one row.
CREATE TABLE events (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    event_type TEXT NOT NULL,
    dedupe_key TEXT NOT NULL,
    payload JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX events_dedupe_idx ON events (org_id, dedupe_key);
CREATE INDEX events_org_idx ON events (org_id, created_at DESC, id DESC);
CREATE INDEX events_undelivered_idx ON events (created_at) WHERE delivered_at IS NULL;
