-- A subscription's description (contract §11): a label its owners give it; null when none.
ALTER TABLE webhook_subscriptions ADD COLUMN description TEXT;
