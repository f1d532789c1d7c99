-- The route catalog as data: each change through /api/v1/gateway writes the whole catalog as a
-- new version (never an update in place), so every proxy loads one consistent version and any
-- version can be read back. The newest version is the one in force.
CREATE TABLE route_catalog_versions (
    version bigint PRIMARY KEY CHECK (version > 0),
    routes jsonb NOT NULL,
    -- What changed, e.g. `model.create gpt-4.1` or `seed from conf/gw.toml`.
    change text NOT NULL,
    actor_user_id uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The gateway-wide operator role, above organizations: manages the route catalog. The
-- bootstrap login holds it; `gw-admin operator grant|revoke <email>` changes it.
CREATE TABLE gateway_operators (
    user_id uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    granted_at timestamptz NOT NULL DEFAULT now()
);
