DROP TABLE {{schema}}.webhook_tallies;
