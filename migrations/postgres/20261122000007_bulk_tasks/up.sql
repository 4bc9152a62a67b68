-- Bulk start from CSV: tasks (integer ids, spec 2.6) and their rows, stored as they are
-- uploaded and deleted as they are handed to the engine.
CREATE TABLE bulk_tasks (
    id             BIGSERIAL PRIMARY KEY,
    environment_id TEXT NOT NULL REFERENCES environments (id),
    flow_id        TEXT NOT NULL REFERENCES action_flows (id),
    mode           TEXT NOT NULL,
    status         TEXT NOT NULL,
    header         TEXT,
    rows_total     BIGINT NOT NULL,
    rows_processed BIGINT NOT NULL,
    rows_failed    BIGINT NOT NULL,
    errors         TEXT NOT NULL,
    cursor         BIGINT NOT NULL,
    lease_until    TIMESTAMP,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL
);
CREATE INDEX bulk_tasks_env ON bulk_tasks (environment_id, status, created);
CREATE INDEX bulk_tasks_status ON bulk_tasks (status);

CREATE TABLE bulk_rows (
    task_id    BIGINT NOT NULL REFERENCES bulk_tasks (id),
    row_number BIGINT NOT NULL,
    cells      TEXT NOT NULL,
    PRIMARY KEY (task_id, row_number)
);
