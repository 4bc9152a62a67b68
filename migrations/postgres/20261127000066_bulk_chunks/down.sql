CREATE TABLE bulk_rows (
    task_id    BIGINT NOT NULL REFERENCES bulk_tasks (id),
    row_number BIGINT NOT NULL,
    cells      TEXT NOT NULL,
    PRIMARY KEY (task_id, row_number)
);
INSERT INTO bulk_rows (task_id, row_number, cells)
SELECT c.task_id, (r.value ->> 0)::BIGINT, (r.value -> 1)::TEXT
FROM bulk_chunks c, json_array_elements(c.cells::json) AS r(value);
DROP TABLE bulk_chunks;
