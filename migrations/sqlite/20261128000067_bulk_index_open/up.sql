-- Issue 23: the count of an environment's bulk invocations (segment, tag and filter targets)
-- that hold a slot (contract §10) is the index's only reader, and it counts pending and running
-- ones. Every bulk invocation ends completed, failed or cancelled, and its entry was kept until
-- the invocation was pruned. The reader spells the condition as its literal text, so that a
-- generic plan (PostgreSQL) and SQLite's planner both see that it implies this one.
DROP INDEX invocations_bulk;
CREATE INDEX invocations_bulk ON invocations (environment_id)
WHERE bulk AND status IN ('pending', 'running');
