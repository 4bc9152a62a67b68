-- Contract §14: daily totals that outlive the rows they count (see the SQLite migration of
-- the same name for what each table holds).
CREATE TABLE flow_folders (
    flow_id   TEXT NOT NULL,
    since     TIMESTAMP NOT NULL,
    folder_id TEXT NOT NULL,
    PRIMARY KEY (flow_id, since)
);
INSERT INTO flow_folders (flow_id, since, folder_id)
SELECT id, TIMESTAMP '1970-01-01 00:00:00', COALESCE(folder_id, '') FROM action_flows;

CREATE FUNCTION workbench_flow_folder() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO flow_folders (flow_id, since, folder_id)
        VALUES (NEW.id, NEW.created, COALESCE(NEW.folder_id, ''))
        ON CONFLICT (flow_id, since) DO UPDATE SET folder_id = excluded.folder_id;
    ELSIF COALESCE(OLD.folder_id, '') <> COALESCE(NEW.folder_id, '') THEN
        INSERT INTO flow_folders (flow_id, since, folder_id)
        VALUES (NEW.id, NEW.updated, COALESCE(NEW.folder_id, ''))
        ON CONFLICT (flow_id, since) DO UPDATE SET folder_id = excluded.folder_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER action_flows_folder AFTER INSERT OR UPDATE OF folder_id ON action_flows
FOR EACH ROW EXECUTE FUNCTION workbench_flow_folder();

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
);
CREATE INDEX flow_totals_folder ON flow_totals (environment_id, folder_id, day);

-- What was written before this migration, counted once, each flow under its folder of now.
INSERT INTO flow_totals
SELECT i.environment_id, i.flow_id, to_char(i.created, 'YYYY-MM-DD'), i.flow_version,
       COALESCE(f.folder_id, ''), i.mode, 'invocations.started', 0, count(*)
FROM invocations i LEFT JOIN action_flows f ON f.id = i.flow_id
GROUP BY 1, 2, 3, 4, 5, 6;
INSERT INTO flow_totals
SELECT i.environment_id, i.flow_id, to_char(i.updated, 'YYYY-MM-DD'), i.flow_version,
       COALESCE(f.folder_id, ''), i.mode, 'invocations.' || i.status, 0, count(*)
FROM invocations i LEFT JOIN action_flows f ON f.id = i.flow_id
WHERE i.status IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2, 3, 4, 5, 6, 7;
INSERT INTO flow_totals
SELECT c.environment_id, c.flow_id, to_char(c.created, 'YYYY-MM-DD'), c.flow_version,
       COALESCE(f.folder_id, ''),
       CASE WHEN (c.context::jsonb ->> 'test') = 'true' THEN 'test' ELSE 'live' END,
       'cards.created', 0, count(*)
FROM card_instances c LEFT JOIN action_flows f ON f.id = c.flow_id
GROUP BY 1, 2, 3, 4, 5, 6;
INSERT INTO flow_totals
SELECT c.environment_id, c.flow_id, to_char(e.created, 'YYYY-MM-DD'), c.flow_version,
       COALESCE(f.folder_id, ''),
       CASE WHEN (c.context::jsonb ->> 'test') = 'true' THEN 'test' ELSE 'live' END,
       'events.' || e.name, 0, count(*)
FROM analytics_events e
JOIN card_instances c ON c.id = e.card_instance_id
LEFT JOIN action_flows f ON f.id = c.flow_id
GROUP BY 1, 2, 3, 4, 5, 6, 7;
INSERT INTO flow_totals
SELECT c.environment_id, c.flow_id, to_char(d.updated, 'YYYY-MM-DD'), c.flow_version,
       COALESCE(f.folder_id, ''),
       CASE WHEN (c.context::jsonb ->> 'test') = 'true' THEN 'test' ELSE 'live' END,
       CASE d.status WHEN 'delivered' THEN 'webhooks.succeeded' ELSE 'webhooks.failed' END,
       0, count(*)
FROM webhook_deliveries d
JOIN analytics_events e ON e.id = d.event_id
JOIN card_instances c ON c.id = e.card_instance_id
LEFT JOIN action_flows f ON f.id = c.flow_id
WHERE d.status IN ('delivered', 'failed')
GROUP BY 1, 2, 3, 4, 5, 6, 7;
