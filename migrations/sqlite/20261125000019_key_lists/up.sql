-- Contract §11: the keys of an environment can be listed (`GET /credentials`, `workbench key
-- list`) with when each last authenticated, recorded at most once a minute per key and process.
ALTER TABLE api_keys ADD COLUMN last_used TIMESTAMP;

-- The new scope `credentials:read` lists keys. A key that may create and revoke them (scope
-- `credentials:write`, which the bootstrap key and keys made with every scope hold) is given it;
-- no other key gains anything.
UPDATE api_keys SET scopes = scopes || ',credentials:read'
WHERE scopes NOT LIKE '%credentials:read%'
  AND scopes LIKE '%credentials:write%';
