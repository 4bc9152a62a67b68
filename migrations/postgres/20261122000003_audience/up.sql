-- End users, their tags, segments and streams.
CREATE TABLE end_users (
    environment_id TEXT NOT NULL REFERENCES environments (id),
    id             TEXT NOT NULL,
    test_user      BOOLEAN NOT NULL,
    attributes     TEXT NOT NULL,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL,
    PRIMARY KEY (environment_id, id)
);
-- "All test users" targets read this index only.
CREATE INDEX end_users_test ON end_users (environment_id, test_user, id);

-- One row per (user, tag). The primary key serves tag targets (environment, tag → users, in
-- id order); the second index serves loading a user's tags.
CREATE TABLE end_user_tags (
    environment_id TEXT NOT NULL,
    tag            TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    PRIMARY KEY (environment_id, tag, user_id),
    FOREIGN KEY (environment_id, user_id) REFERENCES end_users (environment_id, id) ON DELETE CASCADE
);
CREATE INDEX end_user_tags_user ON end_user_tags (environment_id, user_id);

CREATE TABLE segments (
    id             TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL REFERENCES environments (id),
    name           TEXT NOT NULL,
    filter         TEXT NOT NULL,
    created        TIMESTAMP NOT NULL,
    updated        TIMESTAMP NOT NULL
);
CREATE INDEX segments_environment ON segments (environment_id, name);

CREATE TABLE streams (
    id             TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL REFERENCES environments (id),
    name           TEXT NOT NULL,
    is_default     BOOLEAN NOT NULL,
    created        TIMESTAMP NOT NULL,
    UNIQUE (environment_id, name)
);
