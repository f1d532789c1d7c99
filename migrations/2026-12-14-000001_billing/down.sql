DROP TABLE billing_events;
DROP TABLE billing_accounts;
