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
       jsonb_build_object(
           'id', e.id,
           'analyticsEvent', e.name,
           'endUserId', c.user_id,
           'timestamp', to_char(e.created, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'cardContext', jsonb_build_object(
               'cardInstanceStatus', e.status,
               'cardTemplateId', c.template_id,
               'cardTemplateName', c.template_name,
               'cardTemplateVersion', c.flow_version,
               'cardTemplateSettings', jsonb_build_object('sendNotifications', c.content LIKE '%"notification":%'),
               'publishedAt', to_char(e.published_at, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'cardInstanceId', c.id,
               'previousStatus', e.previous_status),
           'properties', jsonb_build_object('values', coalesce(e.submitted, '{}')::jsonb),
           'platformContext', jsonb_build_object(
               'lifecycleId', c.flow_instance_id,
               'targetStreamIds', c.stream_ids::jsonb,
               'targetPlatforms', c.platforms::jsonb,
               'flowInstanceId', c.flow_instance_id,
               'flowInvocationId', c.invocation_id,
               'flowConfigId', c.flow_id,
               'triggerEventSource', CASE WHEN (c.context::jsonb ->> 'test') = 'true' THEN 'test' ELSE 'api' END,
               'eventDetail', coalesce(c.context::jsonb -> 'variables', '{}'),
               'eventNotificationDetail', coalesce(c.context::jsonb -> 'notificationDetail', '{}')),
           'metadata', coalesce(c.context::jsonb -> 'metadata', '{}'))::text,
       e.created
FROM analytics_events e JOIN card_instances c ON c.id = e.card_instance_id;
DROP TABLE analytics_events;
ALTER TABLE analytics_events_full RENAME TO analytics_events;
ALTER INDEX analytics_events_full_pkey RENAME TO analytics_events_pkey;
CREATE INDEX analytics_events_card ON analytics_events (card_instance_id, created);
