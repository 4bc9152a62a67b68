-- Issue 27: SQLite stores the instants of cards, events, invocations and webhook attempts as
-- milliseconds since 1970; PostgreSQL keeps its `timestamp` columns (8 bytes already).
SELECT 1;
