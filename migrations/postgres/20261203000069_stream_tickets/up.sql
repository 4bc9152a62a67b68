-- Browser access (docs/api.md): the web origins each SDK key lets into its end users' routes,
-- as a JSON array of exact origins.
ALTER TABLE sdk_keys ADD COLUMN allowed_origins TEXT NOT NULL DEFAULT '[]';
-- Stream tickets: what a browser's EventSource opens a user's feed stream with. Stored by the
-- hash of their text; each is used once, before `expires`. `kid`, `sdk_key_id`, `key_updated`
-- and `token_expires` are what the ticket keeps of the user token it was minted with.
CREATE TABLE stream_tickets (
    hash TEXT PRIMARY KEY NOT NULL,
    environment_id TEXT NOT NULL,
    end_user TEXT NOT NULL,
    kid TEXT NOT NULL,
    sdk_key_id TEXT NOT NULL,
    key_updated TIMESTAMP NOT NULL,
    token_expires BIGINT NOT NULL,
    expires TIMESTAMP NOT NULL,
    used BOOLEAN NOT NULL DEFAULT FALSE
);
-- Expired tickets are removed as new ones are minted.
CREATE INDEX stream_tickets_expires ON stream_tickets (expires);
