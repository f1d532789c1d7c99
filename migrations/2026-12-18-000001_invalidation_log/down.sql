DROP TABLE invalidation_log;
