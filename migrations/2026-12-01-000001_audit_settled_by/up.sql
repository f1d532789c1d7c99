-- How a request's tokens and cost were settled: from the upstream's own usage report, or from
-- an estimate (the client left a stream and the upstream never sent its usage, a stream broke,
-- the upstream reported none). NULL: nothing reached an upstream (cache hits, refusals).
ALTER TABLE audit_logs ADD COLUMN settled_by TEXT CHECK (settled_by IN ('usage', 'estimate'));
