UPDATE api_keys SET scopes = replace(scopes, ',sdk_keys:read,sdk_keys:write', '');
