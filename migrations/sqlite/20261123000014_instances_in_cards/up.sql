-- A flow instance is kept on its cards: the engine makes all of an instance's cards at once,
-- and each card already held everything of its instance (id, invocation, flow, version, user,
-- time) but its status. One table and three indexes fewer written per user targeted
-- (docs/benchmarks.md, eighth session).
--   instance_status  the instance's status (active, cancelled), the same on each of its cards
--   card_instances_once   one card per (environment, invocation, user, step): what the unique
--                         keys of the instance and of its card ensured together
--   card_instances_cancel a flow's active instances oldest first, for cancel tasks
CREATE TABLE card_instances_new (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    flow_instance_id TEXT NOT NULL,
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
    instance_status  TEXT NOT NULL DEFAULT 'active'
);
INSERT INTO card_instances_new
SELECT c.id, c.environment_id, c.user_id, c.flow_instance_id, c.invocation_id, c.flow_id,
       c.flow_version, c.step_id, c.template_id, c.template_name, c.status, c.priority,
       c.stream_ids, c.platforms, c.content, c.context, c.embargo_until, c.expires_at,
       c.snoozed_until, c.published_at, c.created, c.updated, f.status
FROM card_instances c JOIN flow_instances f ON f.id = c.flow_instance_id;
DROP TABLE card_instances;
DROP TABLE flow_instances;
ALTER TABLE card_instances_new RENAME TO card_instances;
CREATE UNIQUE INDEX card_instances_once ON card_instances (environment_id, invocation_id, user_id, step_id);
CREATE INDEX card_instances_cancel ON card_instances (environment_id, flow_id, instance_status, created, flow_instance_id);
CREATE INDEX card_instances_feed ON card_instances (environment_id, user_id, status, priority, created);
CREATE INDEX card_instances_embargo ON card_instances (status, embargo_until) WHERE embargo_until IS NOT NULL;
CREATE INDEX card_instances_snooze ON card_instances (status, snoozed_until) WHERE snoozed_until IS NOT NULL;
CREATE INDEX card_instances_expiry ON card_instances (status, expires_at) WHERE expires_at IS NOT NULL;
