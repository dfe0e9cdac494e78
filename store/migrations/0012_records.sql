-- Cluster mode's replica (package cluster, records.go): every gateway's
-- store holds the cluster's whole record, fed by the records stream.

-- Records this gateway wrote and has not yet seen acknowledged by the
-- records stream: rounds, written in the round's transaction.
CREATE TABLE records_out (
    id      INTEGER PRIMARY KEY,
    msg_id  TEXT    NOT NULL, -- Nats-Msg-Id: a repeat within the window is dropped
    subject TEXT    NOT NULL,
    data    BLOB    NOT NULL
);

-- Events whose record came from another gateway (stored from it, or a local
-- copy given the original's headers and receipt time).
CREATE TABLE replica_events (
    seq    INTEGER PRIMARY KEY, -- events.seq
    origin TEXT    NOT NULL     -- the gateway that published the record
);

-- The cluster's order of a delivery's rounds (the revision of its entry in
-- the delivery-state bucket): a record older than the row is not applied.
-- 0: recorded here only.
ALTER TABLE deliveries ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
