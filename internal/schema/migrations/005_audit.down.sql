DROP TABLE {{schema}}.audit;
