DROP TABLE flow_totals;
DROP TRIGGER action_flows_folder_moved;
DROP TRIGGER action_flows_folder_new;
DROP TABLE flow_folders;
