-- The deliveries' list order, (created_at, source, event_id, route), the
-- same on every gateway: walked from these indexes, a page sorts only the
-- deliveries of one millisecond. created_at mostly grows, so its entries
-- go in at the index's right edge. A state's list walks deliveries_state,
-- now ordered the same way.
CREATE INDEX deliveries_created ON deliveries (created_at);
DROP INDEX deliveries_state;
CREATE INDEX deliveries_state ON deliveries (state, created_at);
