DROP TABLE {{schema}}.maintenance_runs;
