-- The receipts table: one row per business intent (DESIGN.md at the root of github.com/tempotent/tempotent, Receipts).
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.receipts (
    namespace           text        NOT NULL,
    tenant              text        NOT NULL,
    operation           text        NOT NULL,
    id                  text        NOT NULL,
    token               text        NOT NULL,
    fingerprint         bytea       NOT NULL,
    fingerprint_version smallint    NOT NULL,
    state               text        NOT NULL CHECK (state IN ('pending', 'completed', 'failed')),
    -- fence grows by one at every takeover; only the holder of the current fence may complete.
    fence               bigint      NOT NULL DEFAULT 1,
    lease_expires_at    timestamptz,
    -- false only after an attempt reported that its effect certainly did not happen, so that the
    -- next attempt need not treat the outcome as unknown.
    effect_possible     boolean     NOT NULL DEFAULT true,
    -- the result as a protobuf-encoded Temporal Payload, replayed byte for byte.
    result              bytea,
    error_type          text,
    error_message       text,
    attempts            integer     NOT NULL DEFAULT 1,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz,
    expires_at          timestamptz NOT NULL,
    PRIMARY KEY (namespace, tenant, operation, id)
);

CREATE INDEX receipts_expires_at_idx ON {{schema}}.receipts (expires_at);
