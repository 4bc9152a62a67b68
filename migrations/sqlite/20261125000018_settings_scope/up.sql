-- Contract §16: changing the environment's settings (approvals on or off) needs its own scope,
-- `environment_settings:write` (or role `auth`), no longer `action_flows:write`. A key that held
-- every scope before it existed (the bootstrap key, and keys made with all of them) is given it,
-- so that it keeps every permission; no other key gains anything.
UPDATE api_keys SET scopes = scopes || ',environment_settings:write'
WHERE scopes NOT LIKE '%environment_settings:write%'
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
  AND scopes LIKE '%credentials:write%';
