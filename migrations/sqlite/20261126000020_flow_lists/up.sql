-- Contract §11: a flow's invocations and tasks are listed newest first (by creation time, then
-- by id), a page at a time. Each list reads its flow's rows from the page's start down one
-- index, whatever the environment holds. The invocations' index is one entry more per
-- invocation recorded: without it a list would read every invocation of the environment.
CREATE INDEX invocations_flow ON invocations (environment_id, flow_id, created, id);
CREATE INDEX bulk_tasks_flow ON bulk_tasks (environment_id, flow_id, created, id);
-- The engine's saves read a flow's cancel markers by (environment, flow, created) as before.
DROP INDEX cancel_tasks_flow;
CREATE INDEX cancel_tasks_flow ON cancel_tasks (environment_id, flow_id, created, id);
