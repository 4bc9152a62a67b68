-- Issue 27: the attempt log keyed by (subscription, id) in a table without row ids. It is read
-- by subscription (newest first) and pruned one subscription at a time, and nothing reads an
-- attempt by its id alone: the table's own B-tree serves both, where a row-id table needed a
-- primary-key index and the (subscription, id) index beside it, two thirds of an attempt's
-- bytes again. Its environment is its subscription's: the column is dropped (PostgreSQL too).
CREATE TABLE webhook_attempts_keyed (
    id              TEXT NOT NULL,
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
    created         TIMESTAMP NOT NULL,
    PRIMARY KEY (subscription_id, id)
) WITHOUT ROWID;
INSERT INTO webhook_attempts_keyed (id, subscription_id, delivery_id, event_id,
    event_name, attempt, trigger_kind, status_code, error, duration_ms, response_body,
    next_attempt_at, created)
SELECT id, subscription_id, delivery_id, event_id, event_name, attempt,
    trigger_kind, status_code, error, duration_ms, response_body, next_attempt_at, created
FROM webhook_attempts;
DROP TABLE webhook_attempts;
ALTER TABLE webhook_attempts_keyed RENAME TO webhook_attempts;
