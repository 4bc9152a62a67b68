-- Contract §14: daily totals that outlive the rows they count.
--
-- flow_folders  the folder each flow was in from a time on ('' for none): a flow instance
--               counts under the folder its flow was in when it started, so moving a flow
--               later rewrites no history. Kept by triggers on action_flows, whatever writes
--               them. A flow that existed before this table is taken to have always been in
--               its folder of now.
-- flow_totals   one count per environment, flow, UTC day, flow version, folder at start, mode
--               and metric (`invocations.started`, `cards.created`, `events.card-completed`,
--               `webhooks.failed`, ...), added to (`n = n + excluded.n`) in the transaction
--               that writes what it counts. `shard` spreads the writers of one count over
--               several rows on PostgreSQL (always 0 on SQLite, which writes one transaction at
--               a time); readers add the shards up.
CREATE TABLE flow_folders (
    flow_id   TEXT NOT NULL,
    since     TIMESTAMP NOT NULL,
    folder_id TEXT NOT NULL,
    PRIMARY KEY (flow_id, since)
) WITHOUT ROWID;
INSERT INTO flow_folders (flow_id, since, folder_id)
SELECT id, '1970-01-01 00:00:00', COALESCE(folder_id, '') FROM action_flows;

CREATE TRIGGER action_flows_folder_new AFTER INSERT ON action_flows
BEGIN
    INSERT INTO flow_folders (flow_id, since, folder_id)
    VALUES (NEW.id, NEW.created, COALESCE(NEW.folder_id, ''))
    ON CONFLICT (flow_id, since) DO UPDATE SET folder_id = excluded.folder_id;
END;
CREATE TRIGGER action_flows_folder_moved AFTER UPDATE OF folder_id ON action_flows
WHEN COALESCE(OLD.folder_id, '') <> COALESCE(NEW.folder_id, '')
BEGIN
    INSERT INTO flow_folders (flow_id, since, folder_id)
    VALUES (NEW.id, NEW.updated, COALESCE(NEW.folder_id, ''))
    ON CONFLICT (flow_id, since) DO UPDATE SET folder_id = excluded.folder_id;
END;

CREATE TABLE flow_totals (
    environment_id TEXT NOT NULL,
    flow_id        TEXT NOT NULL,
    day            TEXT NOT NULL,
    flow_version   INTEGER NOT NULL,
    folder_id      TEXT NOT NULL,
    mode           TEXT NOT NULL,
    metric         TEXT NOT NULL,
    shard          INTEGER NOT NULL,
    n              BIGINT NOT NULL,
    PRIMARY KEY (environment_id, flow_id, day, flow_version, folder_id, mode, metric, shard)
) WITHOUT ROWID;
CREATE INDEX flow_totals_folder ON flow_totals (environment_id, folder_id, day);

-- What was written before this migration, counted once, each flow under its folder of now.
INSERT INTO flow_totals
SELECT environment_id, flow_id, substr(created, 1, 10), flow_version,
       COALESCE((SELECT folder_id FROM action_flows f WHERE f.id = i.flow_id), ''), mode,
       'invocations.started', 0, count(*)
FROM invocations i
GROUP BY 1, 2, 3, 4, 5, 6;
INSERT INTO flow_totals
SELECT environment_id, flow_id, substr(updated, 1, 10), flow_version,
       COALESCE((SELECT folder_id FROM action_flows f WHERE f.id = i.flow_id), ''), mode,
       'invocations.' || status, 0, count(*)
FROM invocations i
WHERE status IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2, 3, 4, 5, 6, 7;
INSERT INTO flow_totals
SELECT environment_id, flow_id, substr(created, 1, 10), flow_version,
       COALESCE((SELECT folder_id FROM action_flows f WHERE f.id = c.flow_id), ''),
       CASE WHEN json_extract(context, '$.test') THEN 'test' ELSE 'live' END,
       'cards.created', 0, count(*)
FROM card_instances c
GROUP BY 1, 2, 3, 4, 5, 6;
INSERT INTO flow_totals
SELECT c.environment_id, c.flow_id, substr(e.created, 1, 10), c.flow_version,
       COALESCE((SELECT folder_id FROM action_flows f WHERE f.id = c.flow_id), ''),
       CASE WHEN json_extract(c.context, '$.test') THEN 'test' ELSE 'live' END,
       'events.' || e.name, 0, count(*)
FROM analytics_events e JOIN card_instances c ON c.id = e.card_instance_id
GROUP BY 1, 2, 3, 4, 5, 6, 7;
INSERT INTO flow_totals
SELECT c.environment_id, c.flow_id, substr(d.updated, 1, 10), c.flow_version,
       COALESCE((SELECT folder_id FROM action_flows f WHERE f.id = c.flow_id), ''),
       CASE WHEN json_extract(c.context, '$.test') THEN 'test' ELSE 'live' END,
       CASE d.status WHEN 'delivered' THEN 'webhooks.succeeded' ELSE 'webhooks.failed' END,
       0, count(*)
FROM webhook_deliveries d
JOIN analytics_events e ON e.id = d.event_id
JOIN card_instances c ON c.id = e.card_instance_id
WHERE d.status IN ('delivered', 'failed')
GROUP BY 1, 2, 3, 4, 5, 6, 7;
