-- The publish state moves out of the ~1 KiB events row into two narrow
-- tables, so that marking an event published no longer rewrites its row.
-- Every event is in exactly one of them: outbox until JetStream
-- acknowledged it, then published.

-- The outbox: events not yet acknowledged by JetStream.
CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY -- events.seq
);

-- Acknowledged events: when, and the stream sequence JetStream gave them
-- (at start, an event whose sequence the stream no longer holds is
-- published again). 0: published before stream sequences were recorded.
CREATE TABLE published (
    seq          INTEGER PRIMARY KEY, -- events.seq
    stream_seq   INTEGER NOT NULL,
    published_at INTEGER NOT NULL     -- unix milliseconds
);

INSERT INTO outbox (seq) SELECT seq FROM events WHERE published_at IS NULL ORDER BY seq;
INSERT INTO published (seq, stream_seq, published_at)
    SELECT seq, coalesce(stream_seq, 0), published_at FROM events WHERE published_at IS NOT NULL ORDER BY seq;

-- A claim enters the outbox in the same statement that stores the event.
-- An insert that did nothing (ON CONFLICT DO NOTHING: a duplicate) does not
-- fire it.
CREATE TRIGGER events_enter_outbox AFTER INSERT ON events
BEGIN
    INSERT INTO outbox (seq) VALUES (NEW.seq);
END;

DROP INDEX events_outbox;

-- events.published_at and events.stream_seq are no longer read or written:
-- NULL in new rows, stale in rows migrated here. They stay because dropping
-- a column rewrites the whole table.
