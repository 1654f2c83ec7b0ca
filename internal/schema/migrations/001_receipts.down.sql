DROP TABLE {{schema}}.receipts;
