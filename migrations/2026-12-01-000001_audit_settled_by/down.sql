ALTER TABLE audit_logs DROP COLUMN settled_by;
