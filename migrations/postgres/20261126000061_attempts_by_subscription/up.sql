-- Issue 27: an attempt's environment is its subscription's; the column is dropped. (SQLite
-- also keys its attempt log by (subscription, id) without row ids; PostgreSQL keeps its
-- primary key and (subscription, id) index.)
ALTER TABLE webhook_attempts DROP COLUMN environment_id;
