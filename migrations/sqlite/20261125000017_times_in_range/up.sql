-- Contract §10: every instant stored lies between 1970 and 9999-12-31T23:59:59.999Z. Before
-- the bounds, a card's expiry could be computed past year 9999 (`expiresInterval` of
-- P200000Y), stored as `+201894-...`, which the API then wrote as no RFC 3339 timestamp. Such
-- deadlines are held at the latest instant. A year past 9999 is written with a sign, which
-- sorts before digits as text, so those are found by their first character.
UPDATE card_instances SET expires_at = '9999-12-31 23:59:59.999'
  WHERE substr(expires_at, 1, 1) IN ('+', '-') OR expires_at > '9999-12-31 23:59:59.999';
UPDATE card_instances SET embargo_until = '9999-12-31 23:59:59.999'
  WHERE substr(embargo_until, 1, 1) IN ('+', '-') OR embargo_until > '9999-12-31 23:59:59.999';
UPDATE card_instances SET snoozed_until = '9999-12-31 23:59:59.999'
  WHERE substr(snoozed_until, 1, 1) IN ('+', '-') OR snoozed_until > '9999-12-31 23:59:59.999';
