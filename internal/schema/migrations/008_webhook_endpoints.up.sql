-- Webhook endpoints: the outbox topic each webhook source's deliveries go under (webhook.Handler).
-- Deliveries are remembered per source in the inbox (consumer 'webhook/<source>'), so two handlers
-- of one source with different topics would split its events: whichever takes a delivery first,
-- the other answers it as a duplicate and its topic never gets it. The first handler of a source
-- records its topic here; a handler of that source with another topic, in any process, refuses
-- every delivery (500, logged) instead of losing them.
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.webhook_endpoints (
    source     text        PRIMARY KEY,
    topic      text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
