DROP TABLE flow_totals;
DROP TRIGGER action_flows_folder ON action_flows;
DROP FUNCTION workbench_flow_folder();
DROP TABLE flow_folders;
