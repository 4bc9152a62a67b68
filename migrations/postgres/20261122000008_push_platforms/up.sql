-- Push notification platforms. Credential and principal are AES-256-GCM sealed.
CREATE TABLE push_platforms (
    id             TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL REFERENCES environments (id),
    app_id         TEXT NOT NULL,
    platform       TEXT NOT NULL,
    arn            TEXT NOT NULL,
    enabled        BOOLEAN NOT NULL,
    credential     TEXT NOT NULL,
    principal      TEXT,
    properties     TEXT NOT NULL,
    facts          TEXT NOT NULL,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL,
    UNIQUE (environment_id, app_id, platform)
);
