-- When an operator last set a delivery pending (a retry or a replay; unix
-- milliseconds); NULL: never. Only an operator's round makes such a
-- delivery pending again, so a pending one with it set is an operator's
-- round cut short: its route's consumer may have acked the event's
-- message, and the event is published anew at start (below).
ALTER TABLE deliveries ADD COLUMN reset_at INTEGER;

-- When Requeue put a published event back in the outbox to be published
-- anew (unix milliseconds); NULL for an event not yet published, or one
-- published again under its first Nats-Msg-Id. The relay publishes it
-- under a Nats-Msg-Id of that requeue, so that the stream's duplicate
-- window, which may still hold the first message's ID, does not drop it.
ALTER TABLE outbox ADD COLUMN requeued_at INTEGER;
