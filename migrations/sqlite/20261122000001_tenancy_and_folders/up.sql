-- Tenancy, credentials and folders (SQLite). Timestamps are UTC, stored naive.
CREATE TABLE organisations (
    id      TEXT PRIMARY KEY NOT NULL,
    name    TEXT NOT NULL UNIQUE,
    created TIMESTAMP NOT NULL
);

CREATE TABLE environments (
    id              TEXT PRIMARY KEY NOT NULL,
    organisation_id TEXT NOT NULL REFERENCES organisations (id),
    name            TEXT NOT NULL,
    created         TIMESTAMP NOT NULL,
    UNIQUE (organisation_id, name)
);

CREATE TABLE api_keys (
    id               TEXT PRIMARY KEY NOT NULL,
    organisation_id  TEXT NOT NULL REFERENCES organisations (id),
    name             TEXT,
    secret_hash      TEXT NOT NULL UNIQUE,
    roles            TEXT NOT NULL,
    scopes           TEXT NOT NULL,
    all_environments BOOLEAN NOT NULL,
    created          TIMESTAMP NOT NULL,
    revoked          TIMESTAMP
);

CREATE TABLE api_key_environments (
    key_id         TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    environment_id TEXT NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    PRIMARY KEY (key_id, environment_id)
);

CREATE TABLE access_tokens (
    token_hash TEXT PRIMARY KEY NOT NULL,
    key_id     TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    created    TIMESTAMP NOT NULL,
    expires    TIMESTAMP NOT NULL
);
CREATE INDEX access_tokens_key ON access_tokens (key_id);
CREATE INDEX access_tokens_expires ON access_tokens (expires);

-- A parent must be a folder of the same environment (composite foreign key), and a folder
-- with children cannot be deleted (RESTRICT). Sibling names are unique; roots share the
-- parent key '' so that NULLs do not escape the unique index.
CREATE TABLE folders (
    id              TEXT PRIMARY KEY NOT NULL,
    environment_id  TEXT NOT NULL REFERENCES environments (id),
    organisation_id TEXT NOT NULL REFERENCES organisations (id),
    parent_id       TEXT,
    name            TEXT NOT NULL,
    created         TIMESTAMP NOT NULL,
    updated         TIMESTAMP NOT NULL,
    UNIQUE (environment_id, id),
    FOREIGN KEY (environment_id, parent_id) REFERENCES folders (environment_id, id) ON DELETE RESTRICT
);
CREATE UNIQUE INDEX folders_sibling_name ON folders (environment_id, COALESCE(parent_id, ''), name);
CREATE INDEX folders_parent ON folders (environment_id, parent_id);
