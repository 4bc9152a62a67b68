//! The rows of the webhook tables, as diesel reads and writes them.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::millis::At;
use crate::schema::{webhook_attempts, webhook_deliveries, webhook_subscriptions};

/// Rows one multi-row `INSERT` writes at most.
pub(super) const INSERT_CHUNK: usize = 500;
#[derive(Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = webhook_subscriptions, treat_none_as_null = true)]
pub(super) struct SubscriptionRow {
    pub(super) id: String,
    pub(super) environment_id: String,
    pub(super) url: String,
    pub(super) method: String,
    pub(super) headers: String,
    pub(super) types: String,
    pub(super) card_template_id: Option<String>,
    pub(super) flow_id: Option<String>,
    pub(super) secret: String,
    pub(super) previous_secret: Option<String>,
    pub(super) previous_secret_until: Option<NaiveDateTime>,
    pub(super) enabled: bool,
    pub(super) disabled_reason: Option<String>,
    pub(super) failing_since: Option<NaiveDateTime>,
    pub(super) created: NaiveDateTime,
    pub(super) updated: NaiveDateTime,
    pub(super) description: Option<String>,
}

#[derive(Insertable)]
#[diesel(table_name = webhook_deliveries)]
pub(super) struct DeliveryRow {
    pub(super) id: String,
    pub(super) environment_id: String,
    pub(super) subscription_id: String,
    pub(super) event_id: String,
    pub(super) event_name: String,
    pub(super) status: String,
    pub(super) attempts: i32,
    pub(super) trigger_kind: String,
    pub(super) next_attempt_at: NaiveDateTime,
    pub(super) created: NaiveDateTime,
    pub(super) updated: NaiveDateTime,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_attempts)]
pub(super) struct AttemptRow {
    pub(super) id: String,
    pub(super) subscription_id: String,
    pub(super) delivery_id: Option<String>,
    pub(super) event_id: String,
    pub(super) event_name: String,
    pub(super) attempt: i32,
    pub(super) trigger_kind: String,
    pub(super) status_code: Option<i32>,
    pub(super) error: Option<String>,
    pub(super) duration_ms: i64,
    pub(super) response_body: String,
    pub(super) next_attempt_at: Option<At>,
    pub(super) created: At,
}
