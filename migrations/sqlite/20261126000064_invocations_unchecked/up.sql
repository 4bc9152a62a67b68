-- Issue 23: PostgreSQL no longer checks an invocation's environment and flow as foreign keys
-- (see its migration). SQLite keeps them: dropping one rebuilds the table, and its checks
-- were not measured as a cost there.
SELECT 1;
