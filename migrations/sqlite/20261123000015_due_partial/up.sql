-- The engine claims pending and running invocations, oldest first. Completed and failed ones
-- (nearly all of them: a CSV row's invocation is recorded completed, with its card) are never
-- looked for by status, so only the two statuses claimed are indexed, each alone: one index
-- entry fewer per CSV row. The claim names each status literally (a bound parameter cannot
-- choose a partial index), `invocations_due` in engine.rs.
DROP INDEX invocations_due;
CREATE INDEX invocations_pending ON invocations (created) WHERE status = 'pending';
CREATE INDEX invocations_running ON invocations (created) WHERE status = 'running';
