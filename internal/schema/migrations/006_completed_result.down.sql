-- The void results stored as the nil payload stay so: a version without the constraint replays
-- them as a void result too (the DataConverter's nil payload decodes to the zero value).
ALTER TABLE {{schema}}.receipts DROP CONSTRAINT IF EXISTS receipts_completed_result;
