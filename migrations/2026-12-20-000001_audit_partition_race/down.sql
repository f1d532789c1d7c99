CREATE OR REPLACE FUNCTION gw_audit_partition(at TIMESTAMPTZ) RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    m TIMESTAMP := date_trunc('month', at AT TIME ZONE 'UTC');
    name TEXT := 'audit_logs_y' || to_char(m, 'YYYY') || 'm' || to_char(m, 'MM');
    lo TIMESTAMPTZ := m AT TIME ZONE 'UTC';
    hi TIMESTAMPTZ := (m + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(name) IS NULL THEN
        PERFORM set_config('lock_timeout', '5s', true);
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE audit_logs INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                           'INCLUDING STORAGE INCLUDING COMPRESSION)', name);
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (created_at >= %L AND created_at < %L)',
                           name, name || '_bounds', lo, hi);
            EXECUTE format('ALTER TABLE audit_logs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', name, name || '_bounds');
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
            NULL; -- another writer created it first (the race shows as either)
        END;
    END IF;
    RETURN name;
END $$;
