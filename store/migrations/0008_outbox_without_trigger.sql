-- The writer puts a claimed event in the outbox with a statement of its
-- own, in the same transaction, instead of this trigger. The trigger made
-- the claim write two tables, and SQLite keeps a statement journal for
-- such a statement (its insert may fail after the first table changed):
-- the old content of every page the claim changed, copied at every claim.
-- BenchmarkWriterClaim: 26.2-30.6k -> 22.8-26.2k CPU ns per claim.
DROP TRIGGER events_enter_outbox;
