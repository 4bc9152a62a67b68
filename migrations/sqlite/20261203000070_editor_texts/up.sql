-- The console's editor (docs/console.md): the text each flow version was saved as, so that the
-- editor shows the user's own key order and formatting again. Shown only while it still reads
-- as the version's configuration.
CREATE TABLE editor_texts (
    environment_id TEXT NOT NULL,
    flow_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (environment_id, flow_id, version)
);
