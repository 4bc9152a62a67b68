DROP TABLE folders;
DROP TABLE access_tokens;
DROP TABLE api_key_environments;
DROP TABLE api_keys;
DROP TABLE environments;
DROP TABLE organisations;
