-- Contract §21: a flow that waits or branches stores each user's instance as it goes: a record
-- per step it reached (compact JSON), and when to look at it again (`due`: its earliest
-- deadline, or at once when a card it listens to closed). `revision` fences every save: a
-- claim, a save and a card's closing each change it. Instants are milliseconds, as for cards.
CREATE TABLE flow_instances (
    environment_id TEXT NOT NULL,
    id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    flow_id TEXT NOT NULL,
    flow_version INTEGER NOT NULL,
    user_id TEXT NOT NULL,
    status TEXT NOT NULL,
    steps TEXT NOT NULL,
    due INTEGER,
    lease_until INTEGER,
    revision BIGINT NOT NULL DEFAULT 0,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    PRIMARY KEY (environment_id, id)
);
-- One instance per user an invocation reaches, whatever crashes or processes.
CREATE UNIQUE INDEX flow_instances_user ON flow_instances (environment_id, invocation_id, user_id);
-- The worker's claim: active instances by when they are due.
CREATE INDEX flow_instances_due ON flow_instances (due) WHERE status = 'active';
-- What an invocation's instances did, counted as they go (in the transactions that change
-- them): per instance state (`step_id` empty: `active`, `completed`, `cancelled`, `failed`),
-- and per step `reached`, the steps in each state (`waiting`, `done`, `cancelled`, `failed`)
-- and each outcome (`outcome.<name>`).
CREATE TABLE instance_counts (
    environment_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (environment_id, invocation_id, step_id, metric)
);
-- A publish with `cancelActiveInstances` accepts a cancel task of the instances of the versions
-- before the one it published.
ALTER TABLE cancel_tasks ADD COLUMN before_version INTEGER;
