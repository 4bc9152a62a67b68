-- Back to diesel's text for those instants.

UPDATE card_instances SET
    embargo_until = CASE WHEN typeof(embargo_until) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', embargo_until / 1000.0, 'unixepoch') ELSE embargo_until END,
    expires_at = CASE WHEN typeof(expires_at) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', expires_at / 1000.0, 'unixepoch') ELSE expires_at END,
    snoozed_until = CASE WHEN typeof(snoozed_until) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', snoozed_until / 1000.0, 'unixepoch') ELSE snoozed_until END,
    published_at = CASE WHEN typeof(published_at) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', published_at / 1000.0, 'unixepoch') ELSE published_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') ELSE created END,
    updated = CASE WHEN typeof(updated) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', updated / 1000.0, 'unixepoch') ELSE updated END;

UPDATE analytics_events SET
    published_at = CASE WHEN typeof(published_at) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', published_at / 1000.0, 'unixepoch') ELSE published_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') ELSE created END;

UPDATE invocations SET
    lease_until = CASE WHEN typeof(lease_until) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', lease_until / 1000.0, 'unixepoch') ELSE lease_until END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') ELSE created END,
    updated = CASE WHEN typeof(updated) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', updated / 1000.0, 'unixepoch') ELSE updated END;

UPDATE webhook_attempts SET
    next_attempt_at = CASE WHEN typeof(next_attempt_at) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', next_attempt_at / 1000.0, 'unixepoch') ELSE next_attempt_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') ELSE created END;
