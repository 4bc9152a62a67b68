-- Issue 27: a flow's invocations listed through (flow, created, id). A flow's id is minted by
-- the service and names one environment's flow, so the environment in the key narrowed
-- nothing; the list still filters on it, from the rows it reads for the page anyway.
DROP INDEX invocations_flow;
CREATE INDEX invocations_flow ON invocations (flow_id, created, id);
