-- A month's partition is made without the lock that stops the audit log (docs/scaling.md): the
-- table is created on its own, given a CHECK matching its bounds (so attaching needs no scan),
-- and attached, which takes only SHARE UPDATE EXCLUSIVE on audit_logs (reads and writes go on;
-- CREATE TABLE ... PARTITION OF took ACCESS EXCLUSIVE). The lock waits at most 5 s; a caller
-- that times out tries again later (the admin's upkeep, or a proxy writing into that month).
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

-- Retention no longer drops partitions inside one function (DROP TABLE took ACCESS EXCLUSIVE on
-- audit_logs in the rollups' transaction): the admin detaches each CONCURRENTLY, then drops it.
DROP FUNCTION gw_audit_drop_partitions(TIMESTAMPTZ);
