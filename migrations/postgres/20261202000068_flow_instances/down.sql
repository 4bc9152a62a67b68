ALTER TABLE cancel_tasks DROP COLUMN before_version;
DROP TABLE instance_counts;
DROP TABLE flow_instances;
