DROP INDEX flow_instances_cancel;
DROP TABLE cancel_tasks;
