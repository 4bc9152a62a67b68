-- Cancel tasks: durable markers checked by every engine batch, and the progress of the work.
CREATE TABLE cancel_tasks (
    id             TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL REFERENCES environments (id),
    flow_id        TEXT NOT NULL REFERENCES action_flows (id),
    end_user_id    TEXT,
    invocation_id  TEXT,
    flow_version   INTEGER,
    cancel_cards   BOOLEAN NOT NULL,
    status         TEXT NOT NULL,
    expected       BIGINT,
    actual         BIGINT NOT NULL,
    cards_expected BIGINT,
    cards_actual   BIGINT NOT NULL,
    errors         TEXT NOT NULL,
    lease_until    TIMESTAMP,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL
);
CREATE INDEX cancel_tasks_flow ON cancel_tasks (environment_id, flow_id, created);
CREATE INDEX cancel_tasks_status ON cancel_tasks (status);
-- Cancel workers look for a flow's active instances oldest first.
CREATE INDEX flow_instances_cancel ON flow_instances (environment_id, flow_id, status, created);
