DROP TABLE request_feedback;
DROP TABLE experiments;
ALTER TABLE api_keys DROP COLUMN kind;
DROP INDEX audit_logs_experiment;
ALTER TABLE audit_logs DROP COLUMN template_id, DROP COLUMN template_version, DROP COLUMN experiment_id,
    DROP COLUMN experiment_variant, DROP COLUMN origin;
