DROP TABLE sdk_keys;
