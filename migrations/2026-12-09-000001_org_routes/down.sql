DROP TABLE org_routes;
