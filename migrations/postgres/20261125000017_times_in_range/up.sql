-- Contract §10: every instant stored lies between 1970 and 9999-12-31T23:59:59.999Z. Before
-- the bounds, a card's expiry could be computed past year 9999 (`expiresInterval` of
-- P200000Y); such deadlines are held at the latest instant.
UPDATE card_instances SET expires_at = '9999-12-31 23:59:59.999' WHERE expires_at > '9999-12-31 23:59:59.999';
UPDATE card_instances SET embargo_until = '9999-12-31 23:59:59.999' WHERE embargo_until > '9999-12-31 23:59:59.999';
UPDATE card_instances SET snoozed_until = '9999-12-31 23:59:59.999' WHERE snoozed_until > '9999-12-31 23:59:59.999';
