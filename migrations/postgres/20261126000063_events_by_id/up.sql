-- Issue 27: SQLite keeps its events in a table without row ids; PostgreSQL has no row ids.
SELECT 1;
