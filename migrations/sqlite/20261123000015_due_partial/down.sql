DROP INDEX invocations_pending;
DROP INDEX invocations_running;
CREATE INDEX invocations_due ON invocations (status, created);
