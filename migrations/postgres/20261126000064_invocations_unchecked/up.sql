-- Issue 23: an invocation's environment and flow are no longer checked as foreign keys. Each
-- check was a lookup and a row lock per invocation written: a third to a half of the time of
-- its insert, and a CSV task writes one invocation per row. What they guarded cannot happen
-- here: an invocation is written only for a flow the service has just read in its
-- environment, and neither environments nor flows are ever deleted (a flow is archived; the
-- pruner deletes invocations, never what they name).
ALTER TABLE invocations DROP CONSTRAINT invocations_environment_id_fkey;
ALTER TABLE invocations DROP CONSTRAINT invocations_flow_id_fkey;
