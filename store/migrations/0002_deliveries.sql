-- The stream sequence JetStream gave each published event: at start, an
-- event whose sequence the stream no longer holds is published again.
ALTER TABLE events ADD COLUMN stream_seq INTEGER;

-- One row per (route, event): its state and the outcome of its last round.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
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
    UNIQUE (route, source, event_id)
);
CREATE INDEX deliveries_state ON deliveries (state, id);
CREATE INDEX deliveries_event ON deliveries (source, event_id);

-- Every HTTP attempt of every delivery.
CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    delivery_id INTEGER NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,   -- 1-based, across rounds
    started_at  INTEGER NOT NULL,   -- unix ms
    duration_ms INTEGER NOT NULL,
    status      INTEGER NOT NULL,   -- 0: no response
    error       TEXT    NOT NULL DEFAULT '',
    response    BLOB                -- first 2 KiB of the response body
);
CREATE INDEX attempts_delivery ON attempts (delivery_id, attempt);

-- Small facts about the world outside, e.g. which stream incarnation the
-- stored stream sequences refer to.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
