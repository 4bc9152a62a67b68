-- Webhook subscriptions, their outbox of deliveries, and the attempt log.
CREATE TABLE webhook_subscriptions (
    id                    TEXT PRIMARY KEY NOT NULL,
    environment_id        TEXT NOT NULL REFERENCES environments (id),
    url                   TEXT NOT NULL,
    method                TEXT NOT NULL,
    headers               TEXT NOT NULL,
    types                 TEXT NOT NULL,
    card_template_id      TEXT,
    flow_id               TEXT,
    -- AES-256-GCM sealed (see docs/operations.md); never plaintext.
    secret                TEXT NOT NULL,
    previous_secret       TEXT,
    previous_secret_until TIMESTAMP,
    enabled               BOOLEAN NOT NULL,
    disabled_reason       TEXT,
    failing_since         TIMESTAMP,
    created               TIMESTAMP NOT NULL,
    updated               TIMESTAMP NOT NULL
);
CREATE INDEX webhook_subscriptions_env ON webhook_subscriptions (environment_id, enabled);

-- The outbox: one row per (subscription, event), written with the event. A leased row has
-- next_attempt_at moved to the end of its lease, so an expired lease is simply due again.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY NOT NULL,
    environment_id  TEXT NOT NULL,
    subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions (id),
    event_id        TEXT NOT NULL,
    event_name      TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    trigger_kind    TEXT NOT NULL,
    next_attempt_at TIMESTAMP NOT NULL,
    created         TIMESTAMP NOT NULL,
    updated         TIMESTAMP NOT NULL,
    UNIQUE (subscription_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
-- Which subscriptions have pending work (a loose index scan), and their oldest due rows.
CREATE INDEX webhook_deliveries_sub_due ON webhook_deliveries (status, subscription_id, next_attempt_at);

CREATE TABLE webhook_attempts (
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
CREATE INDEX webhook_attempts_sub ON webhook_attempts (subscription_id, id);
