-- The audit row grows the detail the request context carries: provider-cache and reasoning
-- tokens, every routing attempt with its outcome, and every policy decision.
ALTER TABLE audit_logs
    ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN routing JSONB NOT NULL DEFAULT '[]',
    ADD COLUMN policy JSONB NOT NULL DEFAULT '[]';
