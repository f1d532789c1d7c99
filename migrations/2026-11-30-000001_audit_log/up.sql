-- The audit log as a record that cannot silently lose or change a row: partitioned by month
-- (retention drops whole partitions, never bulk deletes), each organization's rows chained by
-- hash, static metadata referenced rather than repeated, and the tables analytics and
-- reconciliation read from.

ALTER TABLE audit_logs RENAME TO audit_logs_unpartitioned;
ALTER INDEX audit_logs_pkey RENAME TO audit_logs_unpartitioned_pkey;
DROP INDEX audit_logs_org_created_idx;
DROP INDEX audit_logs_org_team_created_idx;

CREATE TABLE audit_logs (
    id UUID NOT NULL,
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
    cache_similarity REAL,
    -- The deployment (region) that answered, the gateway's own share of the time to the
    -- response header in microseconds, and who called.
    deployment TEXT,
    overhead_us INTEGER,
    client_ip INET,
    -- audit_user_agents.id: the first 8 bytes of the SHA-256 of the string.
    user_agent_id BIGINT,
    -- Only when the organization turns body logging on, and after redaction.
    request_body TEXT,
    response_body TEXT,
    -- The organization's hash chain: position, the predecessor's hash and this row's hash
    -- (NULL only for rows written before the chain existed).
    chain_seq BIGINT,
    prev_hash BYTEA,
    row_hash BYTEA,
    -- When the row reached Postgres (rows replayed from a proxy's spool arrive late): the rollup
    -- job finds hours to recompute by it.
    ingested_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);

CREATE INDEX audit_logs_org_created_idx ON audit_logs (org_id, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_team_created_idx ON audit_logs (org_id, team_id, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_key_created_idx ON audit_logs (org_id, api_key_id, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_model_created_idx ON audit_logs (org_id, model, created_at DESC, id DESC);
CREATE INDEX audit_logs_org_chain_idx ON audit_logs (org_id, chain_seq);
CREATE INDEX audit_logs_created_brin ON audit_logs USING brin (created_at);
CREATE INDEX audit_logs_ingested_brin ON audit_logs USING brin (ingested_at);

-- Creates the month's partition if missing; called by the migration, the admin job (months
-- ahead) and a proxy's writer the first time it writes into a month.
CREATE FUNCTION gw_audit_partition(at TIMESTAMPTZ) RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    m TIMESTAMP := date_trunc('month', at AT TIME ZONE 'UTC');
    name TEXT := 'audit_logs_y' || to_char(m, 'YYYY') || 'm' || to_char(m, 'MM');
BEGIN
    IF to_regclass(name) IS NULL THEN
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_logs FOR VALUES FROM (%L) TO (%L)',
                name, m AT TIME ZONE 'UTC', (m + interval '1 month') AT TIME ZONE 'UTC');
        EXCEPTION WHEN duplicate_table THEN
            NULL; -- another writer created it first
        END;
    END IF;
    RETURN name;
END $$;

-- Drops every monthly partition that ends on or before `keep_from`; returns how many.
CREATE FUNCTION gw_audit_drop_partitions(keep_from TIMESTAMPTZ) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE
    r RECORD;
    dropped INTEGER := 0;
BEGIN
    FOR r IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'audit_logs'::regclass AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$'
    LOOP
        IF (to_timestamp(substr(r.relname, 13, 4) || substr(r.relname, 18, 2), 'YYYYMM') AT TIME ZONE 'UTC')::timestamp
            + interval '1 month' <= keep_from AT TIME ZONE 'UTC' THEN
            EXECUTE format('DROP TABLE %I', r.relname);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END $$;

SELECT gw_audit_partition(m)
FROM generate_series(
    date_trunc('month', least(now(), coalesce((SELECT min(created_at) FROM audit_logs_unpartitioned), now()))),
    date_trunc('month', now()) + interval '2 months',
    interval '1 month') AS m;

INSERT INTO audit_logs (id, org_id, team_id, api_key_id, endpoint, model, provider, upstream_model, status_code,
    error_type, stream, prompt_tokens, completion_tokens, total_tokens, cost_usd, latency_ms, upstream_latency_ms,
    ttft_ms, cache_status, policy_action, attempts, created_at, cached_tokens, reasoning_tokens, routing, policy,
    cache_creation_tokens, cache_saved_usd, cache_similarity)
SELECT id, org_id, team_id, api_key_id, endpoint, model, provider, upstream_model, status_code,
    error_type, stream, prompt_tokens, completion_tokens, total_tokens, cost_usd, latency_ms, upstream_latency_ms,
    ttft_ms, cache_status, policy_action, attempts, created_at, cached_tokens, reasoning_tokens, routing, policy,
    cache_creation_tokens, cache_saved_usd, cache_similarity
FROM audit_logs_unpartitioned;
DROP TABLE audit_logs_unpartitioned;

-- The last link of each organization's chain; writers lock it while they append.
CREATE TABLE audit_chain_heads (
    org_id UUID PRIMARY KEY,
    seq BIGINT NOT NULL,
    hash BYTEA NOT NULL
);

CREATE TABLE audit_user_agents (
    id BIGINT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Hourly aggregates the overview reads; latency_hist counts requests per bucket of
-- gw_shared::analytics::LATENCY_BOUNDS_MS.
CREATE TABLE audit_rollups_hourly (
    org_id UUID NOT NULL,
    hour TIMESTAMPTZ NOT NULL,
    team_id UUID,
    model TEXT,
    provider TEXT,
    requests BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    cost_usd NUMERIC NOT NULL,
    cache_saved_usd NUMERIC NOT NULL,
    cache_hits BIGINT NOT NULL,
    cache_lookups BIGINT NOT NULL,
    latency_hist BIGINT[] NOT NULL
);
CREATE UNIQUE INDEX audit_rollups_hourly_key
    ON audit_rollups_hourly (org_id, hour, team_id, model, provider) NULLS NOT DISTINCT;
CREATE INDEX audit_rollups_hourly_hour_idx ON audit_rollups_hourly (hour);

CREATE TABLE audit_rollup_state (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    -- Every hour before this one is aggregated.
    rolled_until TIMESTAMPTZ NOT NULL,
    -- Rows ingested before this instant are reflected in the aggregates.
    scanned_until TIMESTAMPTZ NOT NULL
);
INSERT INTO audit_rollup_state VALUES (1, '1970-01-01T00:00:00Z', '1970-01-01T00:00:00Z');

CREATE TABLE reconcile_runs (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    start_day DATE NOT NULL,
    end_day DATE NOT NULL,
    created_by UUID REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    logged JSONB NOT NULL,
    reported JSONB NOT NULL,
    discrepancies JSONB NOT NULL
);
CREATE INDEX reconcile_runs_org_idx ON reconcile_runs (org_id, created_at DESC, id DESC);

ALTER TABLE organizations ADD COLUMN log_bodies BOOLEAN NOT NULL DEFAULT false;
