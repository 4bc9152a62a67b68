DROP TABLE flow_instances;
