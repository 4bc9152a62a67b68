DROP INDEX invocations_bulk;
CREATE INDEX invocations_bulk ON invocations (environment_id, status) WHERE bulk;
