CREATE TABLE bulk_rows (
    task_id    BIGINT NOT NULL REFERENCES bulk_tasks (id),
    row_number BIGINT NOT NULL,
    cells      TEXT NOT NULL,
    PRIMARY KEY (task_id, row_number)
);
INSERT INTO bulk_rows (task_id, row_number, cells)
SELECT c.task_id, json_extract(r.value, '$[0]'), json(json_extract(r.value, '$[1]'))
FROM bulk_chunks c, json_each(c.cells) AS r;
DROP TABLE bulk_chunks;
