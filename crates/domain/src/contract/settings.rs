//! The case of the settings port: off by default, kept per environment.

use super::fixtures::{t, Stores};
use crate::flow::EnvironmentSettings;

pub(super) async fn settings(s: Stores) {
    let repo = s.settings;
    let set = |on| EnvironmentSettings {
        approvals_enabled: on,
    };
    assert_eq!(repo.get("env_a").await.expect("get"), set(false));
    repo.put("env_a", set(true), t(1)).await.expect("insert");
    assert!(repo.get("env_a").await.expect("get").approvals_enabled);
    assert!(
        !repo.get("env_b").await.expect("get").approvals_enabled,
        "per environment"
    );
    repo.put("env_a", set(false), t(2)).await.expect("update");
    assert!(!repo.get("env_a").await.expect("get").approvals_enabled);
}
