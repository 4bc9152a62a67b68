ALTER TABLE cancel_tasks DROP COLUMN cursor_user;
ALTER TABLE cancel_tasks DROP COLUMN cursor_invocation;
ALTER TABLE cancel_tasks DROP COLUMN cursor_created;
CREATE INDEX card_instances_cancel ON card_instances (environment_id, flow_id, instance_status, created, flow_instance_id);
