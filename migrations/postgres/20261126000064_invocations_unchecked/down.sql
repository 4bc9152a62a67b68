-- Added unchecked, then validated: the table is not locked against writes while its rows are
-- checked.
ALTER TABLE invocations ADD CONSTRAINT invocations_environment_id_fkey
    FOREIGN KEY (environment_id) REFERENCES environments (id) NOT VALID;
ALTER TABLE invocations ADD CONSTRAINT invocations_flow_id_fkey
    FOREIGN KEY (flow_id) REFERENCES action_flows (id) NOT VALID;
ALTER TABLE invocations VALIDATE CONSTRAINT invocations_environment_id_fkey;
ALTER TABLE invocations VALIDATE CONSTRAINT invocations_flow_id_fkey;
