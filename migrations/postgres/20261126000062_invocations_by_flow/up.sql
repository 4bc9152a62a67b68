-- Issue 27: SQLite lists a flow's invocations through (flow, created, id); PostgreSQL keeps
-- (environment, flow, created, id).
SELECT 1;
