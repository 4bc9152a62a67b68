ALTER TABLE invocations ADD CONSTRAINT invocations_environment_id_fkey
    FOREIGN KEY (environment_id) REFERENCES environments (id);
ALTER TABLE invocations ADD CONSTRAINT invocations_flow_id_fkey
    FOREIGN KEY (flow_id) REFERENCES action_flows (id);
