-- Contract §15: SDK keys have their own scopes, `sdk_keys:read` and `sdk_keys:write` (or role
-- `workbench`). A key that held every scope before they existed (the bootstrap key, and keys
-- made with all of them) is given both, so that it keeps every permission; no other key gains
-- anything.
UPDATE api_keys SET scopes = scopes || ',sdk_keys:read,sdk_keys:write'
WHERE scopes NOT LIKE '%sdk_keys:%'
  AND scopes LIKE '%workbench_folders:read%'
  AND scopes LIKE '%workbench_folders:create%'
  AND scopes LIKE '%workbench_folders:update%'
  AND scopes LIKE '%workbench_folders:delete%'
  AND scopes LIKE '%action_flows:read%'
  AND scopes LIKE '%action_flows:trigger%'
  AND scopes LIKE '%action_flows:write%'
  AND scopes LIKE '%webhooks:read%'
  AND scopes LIKE '%webhooks:write%'
  AND scopes LIKE '%notification_platforms:read%'
  AND scopes LIKE '%notification_platforms:write%'
  AND scopes LIKE '%users:read%'
  AND scopes LIKE '%users:write%'
  AND scopes LIKE '%cards:write%'
  AND scopes LIKE '%credentials:write%'
  AND scopes LIKE '%credentials:read%'
  AND scopes LIKE '%environment_settings:write%';
