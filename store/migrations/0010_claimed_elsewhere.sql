-- Claimed elsewhere: in cluster mode, events stored here whose cluster
-- claim another gateway holds (that gateway publishes and delivers them).
-- They leave the outbox and are never published from here. Every event is
-- in at most one of outbox, published, parked and claimed_elsewhere.
CREATE TABLE claimed_elsewhere (
    seq         INTEGER PRIMARY KEY, -- events.seq
    holder      TEXT    NOT NULL,    -- the gateway holding the claim
    recorded_at INTEGER NOT NULL     -- unix milliseconds
);
