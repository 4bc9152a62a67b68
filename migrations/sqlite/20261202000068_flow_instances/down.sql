DROP TABLE instance_counts;
DROP TABLE flow_instances;
