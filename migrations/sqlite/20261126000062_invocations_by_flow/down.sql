DROP INDEX invocations_flow;
CREATE INDEX invocations_flow ON invocations (environment_id, flow_id, created, id);
