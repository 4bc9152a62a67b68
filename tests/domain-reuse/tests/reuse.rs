//! The domain crate as another Rust service would use it: services spawned on a
//! multi-threaded runtime, over the generated mocks, called by a trusted in-process principal.

use std::sync::Arc;

use domain::chrono::{TimeZone, Utc};
use domain::mocks::{MockClock, MockFlowRepository, MockFolderRepository, MockSettingsRepository};
use domain::prelude::*;
use domain::serde_json::json;

fn at() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0)
        .single()
        .expect("time")
}

fn flow() -> Flow {
    Flow {
        latest_version: 1,
        published_version: Some(1),
        revision: 3,
        ..Flow::new("flw_1", "env_1", "org_1", "Welcome", at())
    }
}

fn flows(saves: usize) -> FlowService {
    let mut repo = MockFlowRepository::new();
    repo.expect_get().returning(|_, _| Ok(Some(flow())));
    repo.expect_save()
        .times(saves)
        .withf(|next, expected, _| *expected == 3 && next.revision == 4)
        .returning(|_, _, _| Ok(()));
    let mut clock = MockClock::new();
    clock.expect_now().returning(at);
    FlowService::new(
        Arc::new(repo),
        Arc::new(MockFolderRepository::new()),
        Arc::new(MockSettingsRepository::new()),
        Arc::new(clock),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_changes_are_spawned_on_a_multi_threaded_runtime() {
    let service = Arc::new(flows(1));
    let who = Principal::trusted("reuse-test", "org_1", &["env_1"]);
    let (env, flow) = (EnvironmentId::from("env_1"), FlowId::from("flw_1"));
    let archived = tokio::spawn({
        let service = service.clone();
        async move { service.set_archived(&who, &env, &flow, true).await }
    })
    .await
    .expect("join")
    .expect("archived");
    assert!(archived.archived);
    assert_eq!(archived.updated, at());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_principal_holds_every_permission_in_its_environments_only() {
    let service = Arc::new(flows(0));
    let outsider = Principal::trusted("reuse-test", "org_1", &["env_2"]);
    let (env, flow) = (EnvironmentId::from("env_1"), FlowId::from("flw_1"));
    let refused = tokio::spawn({
        let service = service.clone();
        async move { service.get(&outsider, &env, &flow).await }
    })
    .await
    .expect("join");
    assert!(
        matches!(refused, Err(DomainError::Unauthenticated)),
        "{refused:?}"
    );
}

#[test]
fn configurations_are_validated_without_a_service() {
    let errors = domain::flow::config::validate(&json!({"steps": "none"}), "config");
    assert!(!errors.is_empty());
    assert!(
        errors.iter().all(|e| e.field.starts_with("config")),
        "{errors:?}"
    );
}
