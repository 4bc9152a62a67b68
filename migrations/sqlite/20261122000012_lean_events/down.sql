-- Back to events that carry their payload, rebuilt from their cards as the service built it.
CREATE TABLE analytics_events_full (
    id               TEXT PRIMARY KEY NOT NULL,
    environment_id   TEXT NOT NULL,
    name             TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    card_instance_id TEXT,
    flow_id          TEXT,
    invocation_id    TEXT,
    data             TEXT NOT NULL,
    created          TIMESTAMP NOT NULL
);
INSERT INTO analytics_events_full
SELECT e.id, e.environment_id, e.name, c.user_id, c.id, c.flow_id, c.invocation_id,
       json_object(
           'id', e.id,
           'analyticsEvent', e.name,
           'endUserId', c.user_id,
           'timestamp', strftime('%Y-%m-%dT%H:%M:%fZ', e.created),
           'cardContext', json_object(
               'cardInstanceStatus', e.status,
               'cardTemplateId', c.template_id,
               'cardTemplateName', c.template_name,
               'cardTemplateVersion', c.flow_version,
               'cardTemplateSettings', json_object('sendNotifications', json(CASE WHEN c.content LIKE '%"notification":%' THEN 'true' ELSE 'false' END)),
               'publishedAt', strftime('%Y-%m-%dT%H:%M:%fZ', e.published_at),
               'cardInstanceId', c.id,
               'previousStatus', e.previous_status),
           'properties', json_object('values', json(coalesce(e.submitted, '{}'))),
           'platformContext', json_object(
               'lifecycleId', c.flow_instance_id,
               'targetStreamIds', json(c.stream_ids),
               'targetPlatforms', json(c.platforms),
               'flowInstanceId', c.flow_instance_id,
               'flowInvocationId', c.invocation_id,
               'flowConfigId', c.flow_id,
               'triggerEventSource', CASE WHEN json_extract(c.context, '$.test') THEN 'test' ELSE 'api' END,
               'eventDetail', json(coalesce(json_extract(c.context, '$.variables'), '{}')),
               'eventNotificationDetail', json(coalesce(json_extract(c.context, '$.notificationDetail'), '{}'))),
           'metadata', json(coalesce(json_extract(c.context, '$.metadata'), '{}'))),
       e.created
FROM analytics_events e JOIN card_instances c ON c.id = e.card_instance_id;
DROP TABLE analytics_events;
ALTER TABLE analytics_events_full RENAME TO analytics_events;
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
