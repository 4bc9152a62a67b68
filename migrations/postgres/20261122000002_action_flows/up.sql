-- Action Flows, their configuration versions, and environment settings.
CREATE TABLE environment_settings (
    environment_id    TEXT PRIMARY KEY NOT NULL REFERENCES environments (id),
    approvals_enabled BOOLEAN NOT NULL,
    updated           TIMESTAMP NOT NULL
);

-- folder_id must be a folder of the flow's environment (composite foreign key). Deleting a
-- folder first clears folder_id of its flows, in the same transaction.
CREATE TABLE action_flows (
    id                TEXT PRIMARY KEY NOT NULL,
    environment_id    TEXT NOT NULL REFERENCES environments (id),
    organisation_id   TEXT NOT NULL REFERENCES organisations (id),
    name              TEXT NOT NULL,
    -- The name lower-cased by the service, for case-insensitive search that behaves the same
    -- on both databases.
    name_folded       TEXT NOT NULL,
    description       TEXT NOT NULL,
    folder_id         TEXT,
    archived          BOOLEAN NOT NULL,
    latest_version    INTEGER NOT NULL,
    published_version INTEGER,
    draft_version     INTEGER,
    variables         TEXT NOT NULL,
    revision          BIGINT NOT NULL,
    created           TIMESTAMP NOT NULL,
    updated           TIMESTAMP NOT NULL,
    FOREIGN KEY (environment_id, folder_id) REFERENCES folders (environment_id, id)
);
CREATE INDEX action_flows_page ON action_flows (environment_id, id);
CREATE INDEX action_flows_folder ON action_flows (environment_id, folder_id, id);

CREATE TABLE action_flow_versions (
    flow_id     TEXT NOT NULL REFERENCES action_flows (id) ON DELETE CASCADE,
    version     INTEGER NOT NULL,
    status      TEXT NOT NULL,
    config      TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    approved_by TEXT,
    approved    TIMESTAMP,
    published   TIMESTAMP,
    created     TIMESTAMP NOT NULL,
    updated     TIMESTAMP NOT NULL,
    PRIMARY KEY (flow_id, version)
);
