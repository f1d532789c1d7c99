ALTER TABLE audit_logs DROP COLUMN cache_similarity, DROP COLUMN cache_saved_usd;
DROP TABLE semantic_cache;
DROP TABLE cache_settings;
