-- Back to a row-id table with its id as primary key and the (subscription, id) index.
CREATE TABLE webhook_attempts_rows (
    id              TEXT PRIMARY KEY NOT NULL,
    environment_id  TEXT NOT NULL,
    subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions (id),
    delivery_id     TEXT,
    event_id        TEXT NOT NULL,
    event_name      TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    trigger_kind    TEXT NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    duration_ms     BIGINT NOT NULL,
    response_body   TEXT NOT NULL,
    next_attempt_at TIMESTAMP,
    created         TIMESTAMP NOT NULL
);
INSERT INTO webhook_attempts_rows (id, environment_id, subscription_id, delivery_id, event_id,
    event_name, attempt, trigger_kind, status_code, error, duration_ms, response_body,
    next_attempt_at, created)
SELECT a.id, s.environment_id, a.subscription_id, a.delivery_id, a.event_id, a.event_name,
    a.attempt, a.trigger_kind, a.status_code, a.error, a.duration_ms, a.response_body,
    a.next_attempt_at, a.created
FROM webhook_attempts a JOIN webhook_subscriptions s ON s.id = a.subscription_id;
DROP TABLE webhook_attempts;
ALTER TABLE webhook_attempts_rows RENAME TO webhook_attempts;
CREATE INDEX webhook_attempts_sub ON webhook_attempts (subscription_id, id);
