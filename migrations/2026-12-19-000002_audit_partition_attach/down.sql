CREATE OR REPLACE FUNCTION gw_audit_partition(at TIMESTAMPTZ) RETURNS TEXT LANGUAGE plpgsql AS $$
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
