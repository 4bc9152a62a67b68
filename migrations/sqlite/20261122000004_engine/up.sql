-- Trigger invocations (the durable jobs), flow and card instances, analytics events.
CREATE TABLE invocations (
    environment_id   TEXT NOT NULL REFERENCES environments (id),
    id               TEXT NOT NULL,
    flow_id          TEXT NOT NULL REFERENCES action_flows (id),
    mode             TEXT NOT NULL,
    flow_version     INTEGER NOT NULL,
    fingerprint      TEXT NOT NULL,
    target           TEXT NOT NULL,
    payload          TEXT NOT NULL,
    strict_variables BOOLEAN NOT NULL,
    bulk             BOOLEAN NOT NULL,
    status           TEXT NOT NULL,
    users_targeted   BIGINT NOT NULL,
    cards_created    BIGINT NOT NULL,
    errors           TEXT NOT NULL,
    cursor           TEXT,
    lease_until      TIMESTAMP,
    attempts         INTEGER NOT NULL,
    created          TIMESTAMP NOT NULL,
    updated          TIMESTAMP NOT NULL,
    PRIMARY KEY (environment_id, id)
);
CREATE INDEX invocations_due ON invocations (status, created);
CREATE INDEX invocations_bulk ON invocations (environment_id, bulk, status);

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
CREATE INDEX flow_instances_flow ON flow_instances (environment_id, flow_id, status);

CREATE TABLE card_instances (
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
-- The feed: a user's cards of one status, top priority and newest first.
CREATE INDEX card_instances_feed ON card_instances (environment_id, user_id, status, priority, created);
CREATE INDEX card_instances_embargo ON card_instances (status, embargo_until);
CREATE INDEX card_instances_snooze ON card_instances (status, snoozed_until);
CREATE INDEX card_instances_expiry ON card_instances (status, expires_at);

-- Append-only. The webhooks issue delivers from here.
CREATE TABLE analytics_events (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    name             TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    card_instance_id TEXT,
    flow_id          TEXT,
    invocation_id    TEXT,
    data             TEXT NOT NULL,
    created          TIMESTAMP NOT NULL
);
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
CREATE INDEX analytics_events_time ON analytics_events (environment_id, created);
