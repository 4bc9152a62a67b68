-- The push outbox (contract §8): one row per (card, device), written in the transaction that
-- publishes the card. A leased row has next_attempt_at moved to the end of its lease, so an
-- expired lease (the process died) makes it due again.
CREATE TABLE push_jobs (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL REFERENCES environments (id),
    card_instance_id TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    token            TEXT NOT NULL,
    app_id           TEXT NOT NULL,
    platform         TEXT NOT NULL,
    -- pending, sent, failed, dead_token, skipped
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    next_attempt_at  TIMESTAMP NOT NULL,
    created          TIMESTAMP NOT NULL,
    updated          TIMESTAMP NOT NULL,
    UNIQUE (card_instance_id, token)
);
-- Only pending rows are ever claimed: the index stays as small as the backlog.
CREATE INDEX push_jobs_due ON push_jobs (next_attempt_at) WHERE status = 'pending';
CREATE INDEX push_jobs_card ON push_jobs (environment_id, card_instance_id);
