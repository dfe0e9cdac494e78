-- A delivery's API ID (uid): "dl_" and 32 hex digits derived from (route,
-- source, event ID) alone (store.DeliveryUID), so it is the same on every
-- gateway of a cluster. The rowid stays the key attempts refer to.
--
-- Existing rows carry the default Idempotency-Key, "hg_" and the same 32
-- hex digits: the uid is taken from it. Where rows share a key (a delivery
-- whose event was gone at 0007, beside its event's later copy's) the
-- newest of an existing event takes it; the others, and a row with a key
-- of another form (none is expected), get "dl_row" and their rowid:
-- unique, not cluster-wide.
ALTER TABLE deliveries ADD COLUMN uid TEXT NOT NULL DEFAULT '';
UPDATE deliveries SET uid = CASE
    WHEN r.n = 1 AND length(idempotency_key) = 35 AND idempotency_key GLOB 'hg_*'
        AND substr(idempotency_key, 4) NOT GLOB '*[^0-9a-f]*'
    THEN 'dl_' || substr(idempotency_key, 4)
    ELSE 'dl_row' || deliveries.id
END
FROM (SELECT id, row_number() OVER (PARTITION BY idempotency_key ORDER BY event_seq > 0 DESC, id DESC) AS n
      FROM deliveries) AS r
WHERE r.id = deliveries.id;
CREATE UNIQUE INDEX deliveries_uid ON deliveries (uid);

-- The list order, (created_at, uid), the same on every gateway: walked
-- from this index, a page sorts only the deliveries of one millisecond.
-- A state's list walks deliveries_state, now ordered the same way.
CREATE INDEX deliveries_created ON deliveries (created_at);
DROP INDEX deliveries_state;
CREATE INDEX deliveries_state ON deliveries (state, created_at);
