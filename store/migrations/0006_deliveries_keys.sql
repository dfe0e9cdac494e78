-- Fewer B-trees to update per delivery round.
--
-- deliveries: the unique key is led by (source, event_id), so lookups of
-- an event's deliveries use its prefix and deliveries_event goes; the
-- engine's lookup by (route, source, event_id) uses all of it.
--
-- attempts: the key (delivery_id, attempt) is the table itself (WITHOUT
-- ROWID) instead of a rowid table plus an index on it. Attempt numbers are
-- unique per delivery: the writer numbers them from the delivery's count.
--
-- The tables are rebuilt (create, copy, drop, rename). Foreign keys are on
-- during migrations, so the order matters: the new attempts table refers to
-- the new deliveries table, and the old attempts go before the old
-- deliveries, whose drop would otherwise cascade into attempts.
CREATE TABLE deliveries_new (
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
    UNIQUE (source, event_id, route)
);
INSERT INTO deliveries_new (id, route, source, event_id, event_type, idempotency_key, state, attempts,
        rounds, last_status, last_error, next_attempt_at, created_at, updated_at)
    SELECT id, route, source, event_id, event_type, idempotency_key, state, attempts,
        rounds, last_status, last_error, next_attempt_at, created_at, updated_at
    FROM deliveries ORDER BY id;

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
-- Neither a repeated attempt number nor an attempt without its delivery is
-- expected; either is left out rather than stop the gateway from starting.
INSERT OR IGNORE INTO attempts_new (delivery_id, attempt, started_at, duration_ms, status, error, response)
    SELECT delivery_id, attempt, started_at, duration_ms, status, error, response
    FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries_new)
    ORDER BY delivery_id, attempt, id;

DROP TABLE attempts;
DROP TABLE deliveries;
ALTER TABLE deliveries_new RENAME TO deliveries;
ALTER TABLE attempts_new RENAME TO attempts;
CREATE INDEX deliveries_state ON deliveries (state, id);
