DROP TABLE gateway_operators;
DROP TABLE route_catalog_versions;
