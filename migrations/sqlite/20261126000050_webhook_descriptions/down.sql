ALTER TABLE webhook_subscriptions DROP COLUMN description;
