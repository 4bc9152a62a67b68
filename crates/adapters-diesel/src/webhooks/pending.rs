//! Pending deliveries: which subscriptions have some, for the claims, and cancelling those of
//! a subscription disabled.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use domain::webhook::DeliveryStatus;

use crate::db::{AnyConnection, Failure};
use crate::schema::webhook_deliveries;

/// Subscriptions with pending work one claim looks at, at most.
const MAX_SCANNED_SUBSCRIPTIONS: i64 = 10_000;

#[derive(QueryableByName)]
struct SubscriptionId {
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    id: Option<String>,
}

/// The distinct subscriptions with pending deliveries, by a recursive "loose index scan" over
/// `webhook_deliveries_sub_due`: one probe per subscription, not one row per delivery.
pub(super) fn pending_subscriptions(conn: &mut AnyConnection) -> Result<Vec<String>, Failure> {
    let sql = format!(
        "WITH RECURSIVE subs(id) AS ( \
           SELECT MIN(subscription_id) FROM webhook_deliveries WHERE status = '{pending}' \
           UNION ALL \
           SELECT (SELECT MIN(d.subscription_id) FROM webhook_deliveries d \
                   WHERE d.status = '{pending}' AND d.subscription_id > subs.id) \
           FROM subs WHERE subs.id IS NOT NULL \
         ) SELECT id FROM subs WHERE id IS NOT NULL LIMIT {MAX_SCANNED_SUBSCRIPTIONS}",
        pending = DeliveryStatus::Pending.as_str()
    );
    let rows: Vec<SubscriptionId> =
        crate::per_backend!(&mut *conn, c => diesel::sql_query(&sql).load(c))?;
    Ok(rows.into_iter().filter_map(|r| r.id).collect())
}

/// Cancels what is still queued for a subscription (it was disabled).
pub(super) fn cancel_pending(
    conn: &mut AnyConnection,
    id: &str,
    now: NaiveDateTime,
) -> Result<(), Failure> {
    diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::subscription_id.eq(id))
            .filter(webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str())),
    )
    .set((
        webhook_deliveries::status.eq(DeliveryStatus::Cancelled.as_str()),
        webhook_deliveries::updated.eq(now),
    ))
    .execute(conn)?;
    Ok(())
}
