CREATE TABLE analytics_events_rows (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    card_instance_id TEXT NOT NULL,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL,
    previous_status  TEXT,
    submitted        TEXT,
    published_at     TIMESTAMP,
    created          TIMESTAMP NOT NULL
);
INSERT INTO analytics_events_rows (id, environment_id, card_instance_id, name, status,
    previous_status, submitted, published_at, created)
SELECT id, environment_id, card_instance_id, name, status, previous_status, submitted,
    published_at, created
FROM analytics_events;
DROP TABLE analytics_events;
ALTER TABLE analytics_events_rows RENAME TO analytics_events;
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
