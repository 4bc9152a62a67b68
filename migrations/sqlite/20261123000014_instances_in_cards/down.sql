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
SELECT flow_instance_id, environment_id, invocation_id, flow_id, flow_version, user_id,
       instance_status, MIN(created)
FROM card_instances GROUP BY flow_instance_id;
CREATE INDEX flow_instances_cancel ON flow_instances (environment_id, flow_id, status, created);
CREATE TABLE card_instances_old (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    flow_instance_id TEXT NOT NULL REFERENCES flow_instances (id),
    invocation_id    TEXT NOT NULL,
    flow_id          TEXT NOT NULL,
    flow_version     INTEGER NOT NULL,
    step_id          TEXT NOT NULL,
    template_id      TEXT NOT NULL,
    template_name    TEXT NOT NULL,
    status           TEXT NOT NULL,
    priority         INTEGER NOT NULL,
    stream_ids       TEXT NOT NULL,
    platforms        TEXT NOT NULL,
    content          TEXT NOT NULL,
    context          TEXT NOT NULL,
    embargo_until    TIMESTAMP,
    expires_at       TIMESTAMP,
    snoozed_until    TIMESTAMP,
    published_at     TIMESTAMP,
    created          TIMESTAMP NOT NULL,
    updated          TIMESTAMP NOT NULL,
    UNIQUE (flow_instance_id, step_id)
);
INSERT INTO card_instances_old
SELECT id, environment_id, user_id, flow_instance_id, invocation_id, flow_id, flow_version,
       step_id, template_id, template_name, status, priority, stream_ids, platforms, content,
       context, embargo_until, expires_at, snoozed_until, published_at, created, updated
FROM card_instances;
DROP TABLE card_instances;
ALTER TABLE card_instances_old RENAME TO card_instances;
CREATE INDEX card_instances_feed ON card_instances (environment_id, user_id, status, priority, created);
CREATE INDEX card_instances_embargo ON card_instances (status, embargo_until) WHERE embargo_until IS NOT NULL;
CREATE INDEX card_instances_snooze ON card_instances (status, snoozed_until) WHERE snoozed_until IS NOT NULL;
CREATE INDEX card_instances_expiry ON card_instances (status, expires_at) WHERE expires_at IS NOT NULL;
