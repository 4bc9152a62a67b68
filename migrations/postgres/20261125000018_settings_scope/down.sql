UPDATE api_keys SET scopes = replace(scopes, ',environment_settings:write', '');
