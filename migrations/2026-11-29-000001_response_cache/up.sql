CREATE EXTENSION IF NOT EXISTS vector;

-- Cache settings: one row for the organization (team_id NULL, every field set) and one per team
-- that departs from it (absent fields inherit).
CREATE TABLE cache_settings (
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    team_id UUID REFERENCES teams (id) ON DELETE CASCADE,
    settings JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX cache_settings_scope_idx ON cache_settings (org_id, team_id) NULLS NOT DISTINCT;

-- The semantic tier (L3): an answer per embedded prompt. `scope` is the SHA-256 of everything
-- that must match exactly (organization, embedder, model, parameters, earlier turns); the
-- embedding is compared by cosine distance within it. The column takes any dimension so an
-- organization's own embedding model fits; the local model's 384 dimensions have their index.
CREATE TABLE semantic_cache (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    scope BYTEA NOT NULL,
    dims INTEGER NOT NULL,
    embedding vector NOT NULL,
    -- The embedded prompt (after input policies): a near neighbour must ask the same question.
    prompt TEXT NOT NULL,
    -- The entry as Redis holds it: zstd-compressed metadata and body.
    answer BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX semantic_cache_scope_idx ON semantic_cache (org_id, scope, expires_at);
CREATE INDEX semantic_cache_hnsw_384_idx ON semantic_cache
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dims = 384;
CREATE INDEX semantic_cache_expiry_idx ON semantic_cache (expires_at);

-- What a cache hit saved (the answer's original cost) and, on an L3 hit, how similar the prompt
-- was to the cached one.
ALTER TABLE audit_logs
    ADD COLUMN cache_saved_usd NUMERIC(20, 10) NOT NULL DEFAULT 0,
    ADD COLUMN cache_similarity REAL;
