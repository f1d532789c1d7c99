-- Policy documents, versioned: every change to an organization's policy (or to a team's default
-- policies through the policy endpoints) is a new row; the newest row of a scope is in force.
-- Reverting writes the old document again as a newer version, so history only grows.
CREATE TABLE policy_versions (
    id BIGSERIAL PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    -- NULL: the organization's document; else the team whose defaults this version sets.
    team_id UUID REFERENCES teams (id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    document JSONB NOT NULL,
    -- What made it: 'update', 'template:<name>', 'revert:<version>', 'team_settings'.
    source TEXT NOT NULL,
    actor_id UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX policy_versions_scope_idx
    ON policy_versions (org_id, (COALESCE(team_id, '00000000-0000-0000-0000-000000000000'::uuid)), version DESC);
