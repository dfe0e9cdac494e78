-- Receipt order: the event API lists events by (received_at, seq) and
-- retention finds old events without scanning the table. Intake appends at
-- the right edge of this index, so it costs little.
CREATE INDEX events_received ON events (received_at);
