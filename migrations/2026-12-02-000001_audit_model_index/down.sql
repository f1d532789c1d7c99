CREATE INDEX IF NOT EXISTS audit_logs_org_model_created_idx ON audit_logs (org_id, model, created_at DESC, id DESC);
