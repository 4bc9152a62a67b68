-- An event is stored as its change: the status the card entered, the one it left, the values
-- submitted and the card's publication time then. Its spec 2.9 payload repeats the card's
-- immutable parts (template, streams, platforms, the trigger's context) and is built from the
-- card when read or delivered (docs/architecture.md). Existing events are converted from their
-- stored payload.
CREATE TABLE analytics_events_lean (
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
INSERT INTO analytics_events_lean
SELECT id, environment_id, card_instance_id, name,
       data::jsonb #>> '{cardContext,cardInstanceStatus}',
       data::jsonb #>> '{cardContext,previousStatus}',
       (data::jsonb #> '{properties,values}')::text,
       (data::jsonb #>> '{cardContext,publishedAt}')::timestamptz AT TIME ZONE 'UTC',
       created
FROM analytics_events
WHERE card_instance_id IS NOT NULL;
DROP TABLE analytics_events;
ALTER TABLE analytics_events_lean RENAME TO analytics_events;
ALTER INDEX analytics_events_lean_pkey RENAME TO analytics_events_pkey;
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
