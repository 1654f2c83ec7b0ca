DROP TABLE {{schema}}.inbox_versions;
