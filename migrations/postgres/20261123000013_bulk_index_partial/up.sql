-- The count of running bulk invocations (contract §4's limit) needs only the bulk ones: they
-- are indexed alone. An index led by environment_id over every invocation also let
-- PostgreSQL's planner answer the engine's reads of invocations by (environment_id, id) through
-- it, reading every invocation of the environment per read, in about half the runs of a /start
-- load (docs/benchmarks.md, sixth session). One index entry fewer per trigger, too.
DROP INDEX invocations_bulk;
CREATE INDEX invocations_bulk ON invocations (environment_id, status) WHERE bulk;
