//! Fixtures shared by the tests of the services, here and in crates that use the mocks
//! (feature `mock`): a fixed time, a clock stopped at it, and callers.

use std::sync::Arc;

use chrono::TimeZone;

use crate::tenancy::{KeyAccess, Principal};
use crate::time::MockClock;
use crate::webhook::{new_secret, HttpMethod, Subscription};
use crate::Timestamp;

/// The tests' "now": 2026-11-22T10:00:00Z.
pub fn t0() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
        .single()
        .unwrap_or_default()
}

/// A clock that always reads [`t0`].
pub fn clock() -> Arc<MockClock> {
    let mut clock = MockClock::new();
    clock.expect_now().returning(t0);
    Arc::new(clock)
}

/// Subscription `whk_1` of environment `env`, enabled, to `https://example.com/hook` for
/// `card-completed` events, with a fresh secret, made at [`t0`].
pub fn subscription(env: &str) -> Subscription {
    Subscription {
        id: "whk_1".into(),
        environment_id: env.into(),
        url: "https://example.com/hook".into(),
        method: HttpMethod::Post,
        headers: Default::default(),
        types: vec!["card-completed".into()],
        card_template_id: None,
        flow_id: None,
        description: None,
        secret: new_secret(),
        previous_secret: None,
        previous_secret_until: None,
        enabled: true,
        disabled_reason: None,
        failing_since: None,
        created: t0(),
        updated: t0(),
    }
}

/// A caller: key `key_1` of organisation `org_1`, with `access` in environment `env` only.
pub fn caller(env: &str, access: KeyAccess) -> Principal {
    Principal {
        key_id: "key_1".into(),
        organisation_id: "org_1".into(),
        access,
        environment_ids: vec![env.into()],
        end_user: None,
    }
}

/// Sets the value at a JSON pointer of a test document, or with `Value::Null` removes it:
/// the one-line variations of a valid configuration that validation tables are made of.
/// Panics when the pointer's parent is missing or not a container (a test's own mistake).
pub fn set_pointer(document: &mut serde_json::Value, pointer: &str, value: serde_json::Value) {
    use serde_json::Value;
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    match document.pointer_mut(parent) {
        Some(Value::Object(map)) if value.is_null() => {
            map.remove(key);
        }
        Some(Value::Object(map)) => {
            map.insert(key.to_owned(), value);
        }
        Some(Value::Array(items)) => items[key.parse::<usize>().expect("index")] = value,
        _ => panic!("{parent} is missing or not a container"),
    }
}
