-- The scope removed wherever it stands in the comma-separated list.
UPDATE api_keys
SET scopes = trim(replace(',' || scopes || ',', ',environment_settings:write,', ','), ',')
WHERE scopes LIKE '%environment_settings:write%';
