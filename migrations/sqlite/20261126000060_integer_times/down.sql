-- Back to diesel's text for those instants (a whole second without a fraction, as diesel
-- writes it).

UPDATE card_instances SET
    embargo_until = CASE WHEN typeof(embargo_until) = 'integer'
        THEN CASE WHEN embargo_until % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', embargo_until / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', embargo_until / 1000.0, 'unixepoch') END ELSE embargo_until END,
    expires_at = CASE WHEN typeof(expires_at) = 'integer'
        THEN CASE WHEN expires_at % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', expires_at / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', expires_at / 1000.0, 'unixepoch') END ELSE expires_at END,
    snoozed_until = CASE WHEN typeof(snoozed_until) = 'integer'
        THEN CASE WHEN snoozed_until % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', snoozed_until / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', snoozed_until / 1000.0, 'unixepoch') END ELSE snoozed_until END,
    published_at = CASE WHEN typeof(published_at) = 'integer'
        THEN CASE WHEN published_at % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', published_at / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', published_at / 1000.0, 'unixepoch') END ELSE published_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN CASE WHEN created % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', created / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') END ELSE created END,
    updated = CASE WHEN typeof(updated) = 'integer'
        THEN CASE WHEN updated % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', updated / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', updated / 1000.0, 'unixepoch') END ELSE updated END;

UPDATE analytics_events SET
    published_at = CASE WHEN typeof(published_at) = 'integer'
        THEN CASE WHEN published_at % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', published_at / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', published_at / 1000.0, 'unixepoch') END ELSE published_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN CASE WHEN created % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', created / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') END ELSE created END;

UPDATE invocations SET
    lease_until = CASE WHEN typeof(lease_until) = 'integer'
        THEN CASE WHEN lease_until % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', lease_until / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', lease_until / 1000.0, 'unixepoch') END ELSE lease_until END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN CASE WHEN created % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', created / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') END ELSE created END,
    updated = CASE WHEN typeof(updated) = 'integer'
        THEN CASE WHEN updated % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', updated / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', updated / 1000.0, 'unixepoch') END ELSE updated END;

UPDATE webhook_attempts SET
    next_attempt_at = CASE WHEN typeof(next_attempt_at) = 'integer'
        THEN CASE WHEN next_attempt_at % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', next_attempt_at / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', next_attempt_at / 1000.0, 'unixepoch') END ELSE next_attempt_at END,
    created = CASE WHEN typeof(created) = 'integer'
        THEN CASE WHEN created % 1000 = 0
            THEN strftime('%Y-%m-%d %H:%M:%S', created / 1000, 'unixepoch')
            ELSE strftime('%Y-%m-%d %H:%M:%f', created / 1000.0, 'unixepoch') END ELSE created END;
