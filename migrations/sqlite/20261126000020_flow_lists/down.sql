DROP INDEX cancel_tasks_flow;
CREATE INDEX cancel_tasks_flow ON cancel_tasks (environment_id, flow_id, created);
DROP INDEX bulk_tasks_flow;
DROP INDEX invocations_flow;
