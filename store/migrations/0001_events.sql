-- Every accepted inbound event. UNIQUE(source, event_id) is the dedup:
-- a claim is one INSERT ... ON CONFLICT DO NOTHING.
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY,           -- intake order
    source       TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    event_type   TEXT    NOT NULL DEFAULT '',
    content_type TEXT    NOT NULL DEFAULT '',
    headers      TEXT    NOT NULL DEFAULT '{}', -- JSON object of the headers worth keeping
    body         BLOB    NOT NULL,
    received_at  INTEGER NOT NULL,              -- unix milliseconds
    published_at INTEGER,                       -- NULL: still in the outbox
    UNIQUE (source, event_id)
);

-- The outbox: events not yet acknowledged by JetStream.
CREATE INDEX events_outbox ON events (seq) WHERE published_at IS NULL;
