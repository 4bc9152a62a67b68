-- End users' devices (contract §8): one token belongs to one user.
CREATE TABLE devices (
    environment_id TEXT NOT NULL REFERENCES environments (id),
    token          TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    app_id         TEXT NOT NULL,
    platform       TEXT NOT NULL,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL,
    PRIMARY KEY (environment_id, token)
);
CREATE INDEX devices_user ON devices (environment_id, user_id);
