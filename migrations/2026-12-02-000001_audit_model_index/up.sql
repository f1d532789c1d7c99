-- Every audit row is written into each index of audit_logs, on the core the proxy shares with
-- PostgreSQL. The (org, model, time) index served only the request log's `model` filter; models
-- are few and dense, so that filter walks the organization's time index instead (bounded by the
-- page size and the period), and per-model totals come from the hourly rollups. The key and team
-- indexes stay: keys and teams can be many and sparse, and team-scoped users always filter by team.
DROP INDEX IF EXISTS audit_logs_org_model_created_idx;
