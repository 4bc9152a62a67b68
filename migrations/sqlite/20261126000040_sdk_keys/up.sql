-- Contract §15: SDK keys, the public keys that verify end users' tokens. A token names its
-- key by `name` (its `kid`), unique in the environment.
--
-- public_keys      JSON: [{"type": "RSA" | "EC", "pem": "-----BEGIN PUBLIC KEY-----..."}]
-- allowed_issuers  JSON: an array of strings (empty: any issuer)
-- claim_mappings   JSON: {"<claim>": "<attribute name>"}
CREATE TABLE sdk_keys (
    id                    TEXT PRIMARY KEY NOT NULL,
    environment_id        TEXT NOT NULL REFERENCES environments (id),
    name                  TEXT NOT NULL,
    public_keys           TEXT NOT NULL,
    max_token_expiry_days INTEGER NOT NULL,
    allowed_issuers       TEXT NOT NULL,
    claim_mappings        TEXT NOT NULL,
    created               TIMESTAMP NOT NULL,
    updated               TIMESTAMP NOT NULL,
    UNIQUE (environment_id, name)
);
