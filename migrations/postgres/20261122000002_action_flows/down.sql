DROP TABLE action_flow_versions;
DROP TABLE action_flows;
DROP TABLE environment_settings;
