-- Issue 27: events in a table without row ids, keyed by their id. A row-id table with a text
-- primary key keeps a second B-tree of (id, row id) beside the rows; keyed by the id, the rows
-- are that B-tree. The (card, created) index then ends in the id instead of a row id.
CREATE TABLE analytics_events_keyed (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    card_instance_id TEXT NOT NULL,
    name             TEXT NOT NULL,
    status           TEXT NOT NULL,
    previous_status  TEXT,
    submitted        TEXT,
    published_at     TIMESTAMP,
    created          TIMESTAMP NOT NULL
) WITHOUT ROWID;
INSERT INTO analytics_events_keyed (id, environment_id, card_instance_id, name, status,
    previous_status, submitted, published_at, created)
SELECT id, environment_id, card_instance_id, name, status, previous_status, submitted,
    published_at, created
FROM analytics_events;
DROP TABLE analytics_events;
ALTER TABLE analytics_events_keyed RENAME TO analytics_events;
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
