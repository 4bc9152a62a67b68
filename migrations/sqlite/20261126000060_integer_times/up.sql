-- Issue 27: the instants of the tables written for every card (cards, their events,
-- invocations and webhook attempts) are stored as whole milliseconds since 1970, 6 bytes
-- where their text took 23, in each row and index entry (crates/adapters-diesel/src/millis.rs).
-- The columns are declared TIMESTAMP, whose NUMERIC affinity keeps an integer as it is: no
-- table is rebuilt, and their indexes follow the values. The other tables keep text.
-- julianday() reads diesel's text to the millisecond.

UPDATE card_instances SET
    embargo_until = CASE WHEN typeof(embargo_until) = 'text'
        THEN CAST(round((julianday(embargo_until) - 2440587.5) * 86400000.0) AS INTEGER) ELSE embargo_until END,
    expires_at = CASE WHEN typeof(expires_at) = 'text'
        THEN CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) ELSE expires_at END,
    snoozed_until = CASE WHEN typeof(snoozed_until) = 'text'
        THEN CAST(round((julianday(snoozed_until) - 2440587.5) * 86400000.0) AS INTEGER) ELSE snoozed_until END,
    published_at = CASE WHEN typeof(published_at) = 'text'
        THEN CAST(round((julianday(published_at) - 2440587.5) * 86400000.0) AS INTEGER) ELSE published_at END,
    created = CASE WHEN typeof(created) = 'text'
        THEN CAST(round((julianday(created) - 2440587.5) * 86400000.0) AS INTEGER) ELSE created END,
    updated = CASE WHEN typeof(updated) = 'text'
        THEN CAST(round((julianday(updated) - 2440587.5) * 86400000.0) AS INTEGER) ELSE updated END;

UPDATE analytics_events SET
    published_at = CASE WHEN typeof(published_at) = 'text'
        THEN CAST(round((julianday(published_at) - 2440587.5) * 86400000.0) AS INTEGER) ELSE published_at END,
    created = CASE WHEN typeof(created) = 'text'
        THEN CAST(round((julianday(created) - 2440587.5) * 86400000.0) AS INTEGER) ELSE created END;

UPDATE invocations SET
    lease_until = CASE WHEN typeof(lease_until) = 'text'
        THEN CAST(round((julianday(lease_until) - 2440587.5) * 86400000.0) AS INTEGER) ELSE lease_until END,
    created = CASE WHEN typeof(created) = 'text'
        THEN CAST(round((julianday(created) - 2440587.5) * 86400000.0) AS INTEGER) ELSE created END,
    updated = CASE WHEN typeof(updated) = 'text'
        THEN CAST(round((julianday(updated) - 2440587.5) * 86400000.0) AS INTEGER) ELSE updated END;

UPDATE webhook_attempts SET
    next_attempt_at = CASE WHEN typeof(next_attempt_at) = 'text'
        THEN CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) ELSE next_attempt_at END,
    created = CASE WHEN typeof(created) = 'text'
        THEN CAST(round((julianday(created) - 2440587.5) * 86400000.0) AS INTEGER) ELSE created END;
