ALTER TABLE bulk_tasks DROP COLUMN queued;
