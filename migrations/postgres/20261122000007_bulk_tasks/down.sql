DROP TABLE bulk_rows;
DROP TABLE bulk_tasks;
