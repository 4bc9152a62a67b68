DROP INDEX invocations_ended;
DROP TABLE leases;
