ALTER TABLE audit_logs
    DROP COLUMN policy,
    DROP COLUMN routing,
    DROP COLUMN reasoning_tokens,
    DROP COLUMN cached_tokens;
