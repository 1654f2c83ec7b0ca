DROP FUNCTION {{schema}}.tenant_moved(text, text);
DROP TABLE {{schema}}.tenant_fences;
