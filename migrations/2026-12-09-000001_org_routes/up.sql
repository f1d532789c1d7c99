-- An organization's own providers and models (its own Azure deployment, say), visible to it
-- alone, where the operator allows the provider kind. Versioned like policies: each save is a new
-- row, the newest is in force.
CREATE TABLE org_routes (
    org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    version integer NOT NULL CHECK (version > 0),
    routes jsonb NOT NULL,
    actor_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, version)
);
