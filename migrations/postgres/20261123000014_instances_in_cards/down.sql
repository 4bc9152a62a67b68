-- Back to a table of flow instances, rebuilt from their cards (each instance's first card).
CREATE TABLE flow_instances (
    id             TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    flow_id        TEXT NOT NULL,
    flow_version   INTEGER NOT NULL,
    user_id        TEXT NOT NULL,
    status         TEXT NOT NULL,
    created        TIMESTAMP NOT NULL,
    UNIQUE (environment_id, invocation_id, user_id)
);
INSERT INTO flow_instances
SELECT DISTINCT ON (flow_instance_id) flow_instance_id, environment_id, invocation_id, flow_id,
       flow_version, user_id, instance_status, created
FROM card_instances ORDER BY flow_instance_id, created;
CREATE INDEX flow_instances_cancel ON flow_instances (environment_id, flow_id, status, created);
DROP INDEX card_instances_cancel;
DROP INDEX card_instances_once;
ALTER TABLE card_instances DROP COLUMN instance_status;
ALTER TABLE card_instances ADD CONSTRAINT card_instances_flow_instance_id_step_id_key UNIQUE (flow_instance_id, step_id);
ALTER TABLE card_instances ADD CONSTRAINT card_instances_flow_instance_id_fkey FOREIGN KEY (flow_instance_id) REFERENCES flow_instances (id);
