-- Issue 23: cancel tasks find a flow's cards through its invocations (`invocations_flow`) and
-- each invocation's cards (`card_instances_once`), not through an index of their own. That
-- index was an entry written per card; a fan-out of 1,000,000 users took about a quarter less
-- time without it (docs/benchmarks.md, 2026-11-27).
--   cursor_created, cursor_invocation  the last invocation a task's batches went through
--                                      (created, in milliseconds since 1970, and id), in the
--                                      order they walk them
--   cursor_user   the last user of that invocation done, when a batch stopped within it
DROP INDEX card_instances_cancel;
ALTER TABLE cancel_tasks ADD COLUMN cursor_created BIGINT;
ALTER TABLE cancel_tasks ADD COLUMN cursor_invocation TEXT;
ALTER TABLE cancel_tasks ADD COLUMN cursor_user TEXT;
