-- Issue 23: an upload's rows are stored a batch to a row (`bulk_chunks`), not a row each
-- (`bulk_rows`). Each CSV row was an entry of a table and of its key, written during the
-- upload, read back and deleted while the task ran: on PostgreSQL about 14 µs of a row's
-- time (docs/scaling.md). A chunk holds the rows of one batch of the upload:
--   first_row, last_row  the numbers of its first and last rows (rows are numbered from 1
--                        in file order)
--   row_count            how many rows it holds
--   cells                a JSON array of [number, [cell, ...]], in ascending order of number
-- A stored row becomes a chunk of one.
CREATE TABLE bulk_chunks (
    task_id   BIGINT NOT NULL REFERENCES bulk_tasks (id),
    last_row  BIGINT NOT NULL,
    first_row BIGINT NOT NULL,
    row_count INTEGER NOT NULL,
    cells     TEXT NOT NULL,
    PRIMARY KEY (task_id, last_row)
);
INSERT INTO bulk_chunks (task_id, last_row, first_row, row_count, cells)
SELECT task_id, row_number, row_number, 1, '[[' || row_number || ',' || cells || ']]' FROM bulk_rows;
DROP TABLE bulk_rows;
