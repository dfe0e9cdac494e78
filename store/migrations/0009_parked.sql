-- Parked: events the broker refused for their content (a message over its
-- max payload, say). They leave the outbox so that the events behind them
-- are published; an operator lists them and may put them back. Every
-- event is in at most one of outbox, published and parked.
CREATE TABLE parked (
    seq       INTEGER PRIMARY KEY, -- events.seq
    reason    TEXT    NOT NULL,
    parked_at INTEGER NOT NULL     -- unix milliseconds
);
