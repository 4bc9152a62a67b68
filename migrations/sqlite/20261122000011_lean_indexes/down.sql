DROP INDEX card_instances_embargo;
DROP INDEX card_instances_snooze;
DROP INDEX card_instances_expiry;
CREATE INDEX card_instances_embargo ON card_instances (status, embargo_until);
CREATE INDEX card_instances_snooze ON card_instances (status, snoozed_until);
CREATE INDEX card_instances_expiry ON card_instances (status, expires_at);
CREATE INDEX analytics_events_time ON analytics_events (environment_id, created);
CREATE INDEX flow_instances_flow ON flow_instances (environment_id, flow_id, status);
