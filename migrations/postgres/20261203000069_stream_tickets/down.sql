DROP TABLE stream_tickets;
ALTER TABLE sdk_keys DROP COLUMN allowed_origins;
