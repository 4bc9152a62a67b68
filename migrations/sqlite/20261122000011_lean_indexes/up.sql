-- Fewer index entries per card written (measured in docs/benchmarks.md):
-- flow_instances_flow is a prefix of flow_instances_cancel; analytics_events_time serves no
-- query (deliveries have their own outbox); the scheduler's time indexes hold only the cards
-- that have such a time (a comparison on the column implies IS NOT NULL, so the scheduler's
-- queries still use them).
DROP INDEX flow_instances_flow;
DROP INDEX analytics_events_time;
DROP INDEX card_instances_embargo;
DROP INDEX card_instances_snooze;
DROP INDEX card_instances_expiry;
CREATE INDEX card_instances_embargo ON card_instances (status, embargo_until) WHERE embargo_until IS NOT NULL;
CREATE INDEX card_instances_snooze ON card_instances (status, snoozed_until) WHERE snoozed_until IS NOT NULL;
CREATE INDEX card_instances_expiry ON card_instances (status, expires_at) WHERE expires_at IS NOT NULL;
