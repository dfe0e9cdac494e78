-- The deliveries' list order, (created_at, source, event_id, route), the
-- same on every gateway: walked from these indexes, a page sorts only the
-- deliveries of one millisecond. created_at mostly grows, so its entries
-- go in at the index's right edge.
--
-- A state's list walks deliveries_state, now ordered the same way and
-- holding the deliveries not succeeded only: a delivery that succeeded at
-- its first round (most) writes one index entry, deliveries_created, as it
-- wrote one in deliveries_state before. A list of succeeded deliveries
-- walks deliveries_created.
CREATE INDEX deliveries_created ON deliveries (created_at);
DROP INDEX deliveries_state;
CREATE INDEX deliveries_state ON deliveries (state, created_at) WHERE state != 'succeeded';
