UPDATE api_keys SET scopes = REPLACE(scopes, ',credentials:read', '');
ALTER TABLE api_keys DROP COLUMN last_used;
