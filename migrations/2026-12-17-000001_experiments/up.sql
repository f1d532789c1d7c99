-- Templates, experiments and the playground in the audit log (docs/experiments.md,
-- docs/prompt-templates.md, docs/playground.md): which template version a request rendered,
-- which experiment variant it was assigned, and whether the playground sent it.
ALTER TABLE audit_logs
    ADD COLUMN template_id UUID,
    ADD COLUMN template_version INTEGER,
    ADD COLUMN experiment_id UUID,
    ADD COLUMN experiment_variant TEXT,
    ADD COLUMN origin TEXT CHECK (origin IN ('playground'));
CREATE INDEX audit_logs_experiment ON audit_logs (org_id, experiment_id) WHERE experiment_id IS NOT NULL;

-- A playground comparison runs on a short-lived key of its own, never listed with the
-- organization's keys.
ALTER TABLE api_keys ADD COLUMN kind TEXT NOT NULL DEFAULT 'standard' CHECK (kind IN ('standard', 'playground'));

CREATE TABLE experiments (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    description TEXT NOT NULL DEFAULT '',
    metric TEXT NOT NULL CHECK (metric IN ('latency', 'cost', 'error_rate', 'feedback')),
    -- The traffic it applies to: requests for this model name, or rendering this template (or
    -- both), optionally only one team's.
    match_model TEXT,
    match_template_id UUID,
    match_team_id UUID,
    -- [{name, model?, template_version?, weight}]: the first is the control; weights in basis
    -- points summing to 10,000.
    variants JSONB NOT NULL,
    -- Completes once every variant has this many samples without a winner.
    max_samples_per_variant INTEGER NOT NULL CHECK (max_samples_per_variant BETWEEN 30 AND 10000000),
    status TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'running', 'paused', 'completed')),
    -- Why it completed: the test found a winner, every variant reached its sample cap, or an
    -- operator stopped it.
    completion_reason TEXT CHECK (completion_reason IN ('winner', 'max_samples', 'stopped')),
    winner TEXT,
    created_by UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at TIMESTAMPTZ,
    ended_at TIMESTAMPTZ,
    CHECK (match_model IS NOT NULL OR match_template_id IS NOT NULL)
);
CREATE INDEX experiments_org ON experiments (org_id, id DESC);
CREATE INDEX experiments_running ON experiments (org_id) WHERE status = 'running';

-- Feedback scores, one per request (a later score replaces it); joined with the audit row.
CREATE TABLE request_feedback (
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    request_id UUID NOT NULL,
    score DOUBLE PRECISION NOT NULL,
    comment TEXT NOT NULL DEFAULT '',
    created_by UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, request_id)
);
