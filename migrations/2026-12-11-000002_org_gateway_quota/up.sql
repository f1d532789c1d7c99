-- The operator's override of an organization's quota on the gateway's own provider credentials
-- ({"budget": ..., "rate_limits": ...}); NULL: its plan's `[gateway_quota.<plan>]`.
ALTER TABLE organizations ADD COLUMN gateway_quota JSONB;
