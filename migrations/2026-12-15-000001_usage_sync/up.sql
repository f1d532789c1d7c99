-- Metered usage sync (docs/billing.md). The hourly rollups gain what requests answered on the
-- gateway's own provider credentials cost (what a `gateway_cost` meter bills); existing
-- aggregates are dropped and the rollup job rebuilds them from the audit log.
ALTER TABLE audit_rollups_hourly ADD COLUMN gateway_cost_usd NUMERIC NOT NULL DEFAULT 0;
TRUNCATE audit_rollups_hourly;
UPDATE audit_rollup_state SET rolled_until = '1970-01-01T00:00:00Z', scanned_until = '1970-01-01T00:00:00Z';

-- The sync ledger: every send of an hour's usage to the billing provider, what it sent and what
-- became of it. Revision 0 is the hour itself; 1 and on are adjustments for rows that arrived
-- after it was sent. The identifier is the provider's idempotency key.
CREATE TABLE billing_usage_sync (
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    usage TEXT NOT NULL CHECK (usage IN ('requests', 'tokens', 'gateway_cost')),
    hour TIMESTAMPTZ NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 0),
    event_name TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    -- What this send carries, in the meter's whole units, and the hour's total once it counts.
    quantity BIGINT NOT NULL CHECK (quantity >= 0),
    hour_total BIGINT NOT NULL,
    identifier TEXT NOT NULL UNIQUE,
    -- pending: to send; sent: the provider took it; empty: nothing to send (zero); failed: given
    -- up after the configured tries (usage.sync_failed emitted).
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'empty', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    last_error TEXT,
    -- The provider's answer to the send that succeeded (its event's identifier).
    provider_answer TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at TIMESTAMPTZ,
    PRIMARY KEY (org_id, usage, hour, revision)
);
CREATE INDEX billing_usage_sync_due ON billing_usage_sync (next_attempt_at) WHERE status = 'pending';

-- Where the sync stands: every hour before synced_until has its ledger rows; audit rows
-- ingested before scanned_until have been checked for adjustments.
CREATE TABLE billing_sync_state (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    synced_until TIMESTAMPTZ NOT NULL,
    scanned_until TIMESTAMPTZ NOT NULL
);
INSERT INTO billing_sync_state VALUES (1, '1970-01-01T00:00:00Z', '1970-01-01T00:00:00Z');
