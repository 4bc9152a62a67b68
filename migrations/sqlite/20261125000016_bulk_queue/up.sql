-- Contract §10: a CSV task holds one of its environment's five slots only while it processes.
-- An upload accepted while every slot is taken waits, queued, and starts when one frees.
ALTER TABLE bulk_tasks ADD COLUMN queued BOOLEAN NOT NULL DEFAULT FALSE;
