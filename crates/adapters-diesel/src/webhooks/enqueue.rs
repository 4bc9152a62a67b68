//! The deliveries of new events: written by every transaction that appends analytics events,
//! in that transaction.

use diesel::prelude::*;
use domain::card::AnalyticsEvent;
use domain::id::{new_id, IdKind};
use domain::webhook::DeliveryStatus;

use crate::db::{AnyConnection, Failure};
use crate::error::corrupt;
use crate::schema::{webhook_deliveries, webhook_subscriptions};

use super::rows::{DeliveryRow, INSERT_CHUNK};

/// A webhook subscription's id, environment, event types, card template filter and flow
/// filter.
type Filter = (String, String, String, Option<String>, Option<String>);

/// The enabled subscriptions of `envs`.
pub(crate) fn subscriptions_of(
    conn: &mut AnyConnection,
    envs: &[&str],
) -> Result<Vec<Filter>, Failure> {
    crate::outbox::enabled_in!(
        conn,
        envs,
        webhook_subscriptions,
        (id, environment_id, types, card_template_id, flow_id)
    )
}

/// The outbox half of every event write: one pending delivery per enabled subscription that
/// wants the event, in the caller's transaction.
pub(crate) fn enqueue(conn: &mut AnyConnection, events: &[&AnalyticsEvent]) -> Result<(), Failure> {
    if events.is_empty() {
        return Ok(());
    }
    let mut envs: Vec<&str> = events.iter().map(|e| e.environment_id()).collect();
    envs.sort_unstable();
    envs.dedup();
    let filters = subscriptions_of(conn, &envs)?;
    if filters.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::new();
    for (id, env, types, template, flow) in filters {
        let types: Vec<String> = serde_json::from_str(&types)
            .map_err(|e| Failure::Domain(corrupt("webhook types", e)))?;
        for event in events.iter().filter(|e| {
            e.environment_id() == env
                && domain::webhook::wants(&types, template.as_deref(), flow.as_deref(), e)
        }) {
            let at = event.created.naive_utc();
            rows.push(DeliveryRow {
                id: new_id(IdKind::Delivery),
                environment_id: env.clone(),
                subscription_id: id.clone(),
                event_id: event.id.clone().into(),
                event_name: event.name.clone(),
                status: DeliveryStatus::Pending.as_str().into(),
                attempts: 0,
                trigger_kind: "scheduled".into(),
                next_attempt_at: at,
                created: at,
                updated: at,
            });
        }
    }
    if !rows.is_empty() {
        crate::db::notices::queued(crate::Work::Deliveries);
    }
    match conn {
        // One text for any number of rows, kept prepared (see `crate::columns`).
        AnyConnection::Postgresql(c) => {
            delivery_columns(rows).run(c)?;
        }
        AnyConnection::Sqlite(c) => {
            for chunk in rows.chunks(INSERT_CHUNK) {
                diesel::insert_into(webhook_deliveries::table)
                    .values(chunk)
                    .execute(c)?;
            }
        }
    }
    Ok(())
}

/// Deliveries as one PostgreSQL insert of a column each.
fn delivery_columns(rows: Vec<DeliveryRow>) -> crate::columns::ColumnInsert {
    crate::columns::column_insert!("webhook_deliveries", rows, "", {
        // Classes: 1 the subscription and the state, 2 the event's name, 3 the time.
        id: Text,
        environment_id: Text @ 1,
        subscription_id: Text @ 1,
        event_id: Text,
        event_name: Text @ 2,
        status: Text @ 1,
        attempts: Int @ 1,
        trigger_kind: Text @ 1,
        next_attempt_at: Stamp @ 3,
        created: Stamp @ 3,
        updated: Stamp @ 3,
    })
}
