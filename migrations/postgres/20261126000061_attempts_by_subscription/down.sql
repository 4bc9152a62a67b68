ALTER TABLE webhook_attempts ADD COLUMN environment_id TEXT NOT NULL DEFAULT '';
UPDATE webhook_attempts a SET environment_id = s.environment_id
FROM webhook_subscriptions s WHERE s.id = a.subscription_id;
ALTER TABLE webhook_attempts ALTER COLUMN environment_id DROP DEFAULT;
