-- Contract §14: pruning.
--
-- leases             work one process at a time does across those sharing the database (the
--                    pruner): its holder until a time of the database's clock.
-- invocations_ended  the final invocations by the time they ended, which the pruner reads
--                    oldest first (its condition is written the same in the pruner's query).
CREATE TABLE leases (
    name   TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    until  TIMESTAMP NOT NULL
);
CREATE INDEX invocations_ended ON invocations (updated)
WHERE status IN ('completed', 'failed', 'cancelled');
