//! The deliveries of new events: written by every transaction that appends analytics events,
//! in that transaction.

use super::*;

/// A webhook subscription's id, environment, event types, card template filter and flow
/// filter.
type Filter = (String, String, String, Option<String>, Option<String>);

/// The enabled subscriptions of `envs`.
fn subscriptions_of(conn: &mut AnyConnection, envs: &[&str]) -> Result<Vec<Filter>, Failure> {
    macro_rules! enabled {
        ($envs:expr) => {
            webhook_subscriptions::table
                .filter($envs)
                .filter(webhook_subscriptions::enabled.eq(true))
                .select((
                    webhook_subscriptions::id,
                    webhook_subscriptions::environment_id,
                    webhook_subscriptions::types,
                    webhook_subscriptions::card_template_id,
                    webhook_subscriptions::flow_id,
                ))
        };
    }
    Ok(match conn {
        // One environment at a time: diesel prepares an `IN (...)` list again at every
        // execution on SQLite, where `= ?` it prepares once per connection (preparing the list
        // was 2.2% of the samples of the recorder's writing thread under a `/start` load,
        // docs/benchmarks.md, 2026-11-28, ba3aa9a); a transaction's events rarely come from
        // more than one environment.
        AnyConnection::Sqlite(c) => {
            let mut all = Vec::new();
            for env in envs {
                all.extend(
                    enabled!(webhook_subscriptions::environment_id.eq(env)).load::<Filter>(c)?,
                );
            }
            all
        }
        // `= ANY($1)`: one statement whatever the number of environments.
        AnyConnection::Postgresql(c) => {
            enabled!(webhook_subscriptions::environment_id.eq_any(envs)).load(c)?
        }
    })
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
    for chunk in rows.chunks(INSERT_CHUNK) {
        crate::per_backend!(&mut *conn, c => diesel::insert_into(webhook_deliveries::table).values(chunk).execute(c))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscriptions_read_for_each_transaction_is_prepared_once_per_connection_on_sqlite() {
        let kept = crate::testing::sqlite_kept(|conn| {
            let Ok(found) = subscriptions_of(conn, &["env_a", "env_b"]) else {
                panic!("the read failed")
            };
            assert!(found.is_empty());
        });
        let reads = kept
            .iter()
            .filter(|sql| sql.contains("webhook_subscriptions"));
        assert_eq!(reads.count(), 1, "{kept:#?}");
    }
}
