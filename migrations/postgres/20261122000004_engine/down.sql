DROP TABLE analytics_events;
DROP TABLE card_instances;
DROP TABLE flow_instances;
DROP TABLE invocations;
