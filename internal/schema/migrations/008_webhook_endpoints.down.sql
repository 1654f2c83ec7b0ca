DROP TABLE {{schema}}.webhook_endpoints;
