-- Deliveries are keyed by (event_seq, route): the event's intake sequence,
-- which travels in every message as Hookgate-Seq, instead of the
-- provider's (source, event_id). Sequences ascend, so a new delivery's key
-- and the engine's lookup before its round land at the right edge of the
-- index, in pages the writer holds, however random the providers' IDs are.
-- source and event_id stay as columns (the API shows them), unindexed.
--
-- A delivery whose event is gone (retention deletes them together, so
-- none is expected) keeps its row under -id, which no event has.
--
-- Rebuilt as in 0006: the new attempts table refers to the new deliveries
-- table, and the old attempts go before the old deliveries.
CREATE TABLE deliveries_new (
    id              INTEGER PRIMARY KEY,
    event_seq       INTEGER NOT NULL,            -- events.seq
    route           TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_type      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL,
    state           TEXT    NOT NULL,            -- pending, retrying, succeeded, dead
    attempts        INTEGER NOT NULL DEFAULT 0,  -- HTTP attempts made
    rounds          INTEGER NOT NULL DEFAULT 0,  -- long-schedule rounds failed
    last_status     INTEGER NOT NULL DEFAULT 0,  -- last HTTP status, 0: none
    last_error      TEXT    NOT NULL DEFAULT '',
    next_attempt_at INTEGER,                     -- unix ms, while retrying
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (event_seq, route)
);
INSERT INTO deliveries_new (id, event_seq, route, source, event_id, event_type, idempotency_key, state,
        attempts, rounds, last_status, last_error, next_attempt_at, created_at, updated_at)
    SELECT d.id, coalesce(e.seq, -d.id), d.route, d.source, d.event_id, d.event_type, d.idempotency_key,
        d.state, d.attempts, d.rounds, d.last_status, d.last_error, d.next_attempt_at, d.created_at, d.updated_at
    FROM deliveries d LEFT JOIN events e ON e.source = d.source AND e.event_id = d.event_id
    ORDER BY d.id;

CREATE TABLE attempts_new (
    delivery_id INTEGER NOT NULL REFERENCES deliveries_new (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,   -- 1-based, across rounds
    started_at  INTEGER NOT NULL,   -- unix ms
    duration_ms INTEGER NOT NULL,
    status      INTEGER NOT NULL,   -- 0: no response
    error       TEXT    NOT NULL DEFAULT '',
    response    BLOB,               -- first 2 KiB of the response body
    PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;
INSERT INTO attempts_new (delivery_id, attempt, started_at, duration_ms, status, error, response)
    SELECT delivery_id, attempt, started_at, duration_ms, status, error, response
    FROM attempts ORDER BY delivery_id, attempt;

DROP TABLE attempts;
DROP TABLE deliveries;
ALTER TABLE deliveries_new RENAME TO deliveries;
ALTER TABLE attempts_new RENAME TO attempts;
CREATE INDEX deliveries_state ON deliveries (state, id);
