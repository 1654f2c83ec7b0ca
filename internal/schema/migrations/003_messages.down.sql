DROP TABLE {{schema}}.inbox;
DROP TABLE {{schema}}.outbox;
