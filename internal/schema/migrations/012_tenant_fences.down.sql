DROP FUNCTION {{schema}}.tenant_fences_read_committed();
DROP FUNCTION {{schema}}.tenant_moved(text, text);
DROP TABLE {{schema}}.tenant_fences;
