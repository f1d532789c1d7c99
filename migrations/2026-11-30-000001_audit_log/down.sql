ALTER TABLE organizations DROP COLUMN log_bodies;
DROP TABLE reconcile_runs;
DROP TABLE audit_rollup_state;
DROP TABLE audit_rollups_hourly;
DROP TABLE audit_user_agents;
DROP TABLE audit_chain_heads;

CREATE TABLE audit_logs_unpartitioned (
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
    created_at TIMESTAMPTZ NOT NULL,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    routing JSONB NOT NULL DEFAULT '[]',
    policy JSONB NOT NULL DEFAULT '[]',
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cache_saved_usd NUMERIC(20, 10) NOT NULL DEFAULT 0,
    cache_similarity REAL
);
INSERT INTO audit_logs_unpartitioned
SELECT id, org_id, team_id, api_key_id, endpoint, model, provider, upstream_model, status_code,
    error_type, stream, prompt_tokens, completion_tokens, total_tokens, cost_usd, latency_ms, upstream_latency_ms,
    ttft_ms, cache_status, policy_action, attempts, created_at, cached_tokens, reasoning_tokens, routing, policy,
    cache_creation_tokens, cache_saved_usd, cache_similarity
FROM audit_logs ON CONFLICT (id) DO NOTHING;
DROP TABLE audit_logs;
DROP FUNCTION gw_audit_drop_partitions(TIMESTAMPTZ);
DROP FUNCTION gw_audit_partition(TIMESTAMPTZ);
ALTER TABLE audit_logs_unpartitioned RENAME TO audit_logs;
ALTER INDEX audit_logs_unpartitioned_pkey RENAME TO audit_logs_pkey;
CREATE INDEX audit_logs_org_created_idx ON audit_logs (org_id, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_team_created_idx ON audit_logs (org_id, team_id, created_at DESC);
